/* How a kernel cuts its work between threads: into pieces fixed by the shape and by pieces_count()
 * (the cores this process may use, read once), never by `nth`, the threads computing now.
 *
 * ggmlpy's dynamic threads (core/threads.py) run a graph on fewer threads than planned while the
 * machine is busy. A product cut into other pieces rounds otherwise (OpenBLAS sums a product's
 * inner dimension in blocks whose sizes follow the shape it is given), so a cut by `nth` would let
 * the load change a result's last bits. Invariant: a piece's result depends on its inputs alone;
 * `nth` only decides which thread computes which piece: thread ith takes pieces ith, ith + nth,
 * ith + 2 nth, ...
 */
#ifndef GGMLPY_PIECES_H
#define GGMLPY_PIECES_H

#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The cores this process may use (its affinity mask), read at the first call and kept: the same
 * count for every graph of the process, whatever set_num_threads or the load say. (The system call
 * itself: glibc's wrapper and CPU_COUNT need _GNU_SOURCE before the first system header.) */
static inline int pieces_count(void) {
    static int count;  /* 0: not read yet (every thread reads the same value; the store is atomic) */
    int n = __atomic_load_n(&count, __ATOMIC_RELAXED);
    if (n > 0)
        return n;
    unsigned long mask[64] = {0};  /* 4096 CPUs */
    long bytes = syscall(SYS_sched_getaffinity, 0, sizeof mask, mask);
    n = 0;
    for (long i = 0; i < bytes / (long)sizeof mask[0]; i++)
        n += __builtin_popcountl(mask[i]);
    if (n < 1)
        n = (int)sysconf(_SC_NPROCESSORS_ONLN);
    n = n < 1 ? 1 : n;
    __atomic_store_n(&count, n, __ATOMIC_RELAXED);
    return n;
}

/* [*lo, *hi): piece `p` of `n` items cut into `count` pieces of whole multiples of `align` items
 * (a last piece may be shorter, and pieces past the end are empty). */
static inline void piece_range(int64_t n, int64_t count, int64_t align, int64_t p, int64_t *lo, int64_t *hi) {
    int64_t per = ((n + count - 1) / count + align - 1) / align * align;
    per = per < 1 ? 1 : per;
    *lo = per * p < n ? per * p : n;
    *hi = *lo + per < n ? *lo + per : n;
}

#endif
