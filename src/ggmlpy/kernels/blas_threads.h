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
extern void omp_set_num_threads(int n) __attribute__((weak));
extern int omp_in_parallel(void) __attribute__((weak));

/* The OpenMP count is a per-thread setting that outlives the op, and thread 0 of ggml's pool is
 * the thread that asked for the graph: PyTorch's wheel ships a libgomp.so.1 that, loaded after
 * OpenBLAS's, is the same runtime, so torch's own parallel regions would then run on one thread.
 * Each op therefore gives the thread its count back when it is done: BLAS_ON_THIS_THREAD_ONLY()
 * sets one thread for the rest of the enclosing block and restores the count when the block is
 * left, by whatever return. */
static inline int blas_on_this_thread_only(void) {  /* the count to restore, 0 for none */
    if (omp_in_parallel && omp_in_parallel())
        return 0;  /* an OpenMP libggml's region: OpenBLAS keeps to the calling thread by itself */
    if (omp_get_max_threads) {
        const int before = omp_get_max_threads();
        if (before == 1)
            return 0;
        openblas_set_num_threads(1);
        return before;
    }
    if (openblas_get_num_threads() != 1)
        openblas_set_num_threads(1);  /* the sequential build: no OpenMP runtime for others to share */
    return 0;
}

static inline void blas_threads_restore(const int *before) {
    if (*before > 0 && omp_set_num_threads)
        omp_set_num_threads(*before);  /* OpenBLAS reads the thread's count again at its next call */
}

#define BLAS_ON_THIS_THREAD_ONLY() \
    const int blas_threads_before __attribute__((cleanup(blas_threads_restore))) = blas_on_this_thread_only()

#endif
