/* A buffer of at least n floats, 64-byte aligned, grown as needed and kept between calls.
 *
 * A kernel declares one `static __thread kept_buffer` per use: ggml's threads live as long as the
 * backend, so each thread allocates (and first touches the pages of) its buffer once, not at every
 * call. grown() returns NULL when out of memory; the caller then writes NaN over its output rather
 * than a value computed without its buffer.
 */
#ifndef GGMLPY_KEPT_BUFFER_H
#define GGMLPY_KEPT_BUFFER_H

#include <stdlib.h>

typedef struct { float *buf; size_t cap; } kept_buffer;

static inline float *grown(kept_buffer *b, size_t n) {
    if (n > b->cap) {
        free(b->buf);
        b->cap = (n + 1023) & ~(size_t)1023;  /* whole 4 KiB: a multiple of the alignment, as aligned_alloc needs */
        b->buf = aligned_alloc(64, b->cap * sizeof(float));
        if (b->buf == NULL)
            b->cap = 0;
    }
    return b->buf;
}

#endif
