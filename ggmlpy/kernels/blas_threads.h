/* OpenBLAS on the calling thread alone, for the kernels whose threads (ggml's) each call it.
 *
 * OpenBLAS's OpenMP build runs a call on one thread inside an OpenMP region, and outside one on
 * as many as the calling thread's OpenMP thread count (omp_get_max_threads, a per-thread value):
 * ggml's own pool threads are in no OpenMP region, so each would start a team of its own. Setting
 * OpenBLAS to one thread from a thread sets that thread's count (and OpenBLAS's global one); the
 * check is per thread, as ggml's BLAS backend sets its count on the calling thread before each of
 * its graphs. The omp_* symbols are weak: they come from the libgomp OpenBLAS links (whichever one
 * the process loaded first), and are absent with the sequential build, where nothing is needed
 * but the global count. The pthreads build is refused by the loader.
 */
#ifndef GGMLPY_BLAS_THREADS_H
#define GGMLPY_BLAS_THREADS_H

extern void openblas_set_num_threads(int n);
extern int openblas_get_num_threads(void);
extern int omp_get_max_threads(void) __attribute__((weak));
extern int omp_in_parallel(void) __attribute__((weak));

static inline void blas_on_this_thread_only(void) {
    if (omp_in_parallel && omp_in_parallel())
        return;  /* an OpenMP libggml's region: OpenBLAS keeps to the calling thread by itself */
    if (omp_get_max_threads ? omp_get_max_threads() != 1 : openblas_get_num_threads() != 1)
        openblas_set_num_threads(1);
}

#endif
