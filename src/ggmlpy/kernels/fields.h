/* ggml_tensor's fields, read at the offsets the build passes (-DOFF_NE, -DOFF_NB, -DOFF_SRC,
 * -DOFF_DATA): the ones ggmlpy's loader checks against the loaded libggml at import, so the
 * kernels need no ggml header of a matching version. */
#ifndef GGMLPY_FIELDS_H
#define GGMLPY_FIELDS_H

#include <stdint.h>
#include <string.h>

#if !defined(OFF_NE) || !defined(OFF_NB) || !defined(OFF_SRC) || !defined(OFF_DATA)
#error "build with -DOFF_NE=... -DOFF_NB=... -DOFF_SRC=... -DOFF_DATA=..."
#endif

static inline float *data_of(const void *t) {
    float *p;
    memcpy(&p, (const char *)t + OFF_DATA, sizeof p);
    return p;
}

static inline void ne_of(const void *t, int64_t ne[4]) { memcpy(ne, (const char *)t + OFF_NE, 4 * sizeof(int64_t)); }

static inline void nb_of(const void *t, int64_t nb[4]) { memcpy(nb, (const char *)t + OFF_NB, 4 * sizeof(int64_t)); }

static inline int64_t nelements(const void *t) {
    int64_t ne[4];
    ne_of(t, ne);
    return ne[0] * ne[1] * ne[2] * ne[3];
}

/* the i-th argument of a custom op (ggml_custom_4d's args, map_custom's a, b) */
static inline const void *src_of(const void *t, int i) {
    const void *s;
    memcpy(&s, (const char *)t + OFF_SRC + i * sizeof s, sizeof s);
    return s;
}

#endif
