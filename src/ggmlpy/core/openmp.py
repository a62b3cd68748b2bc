"""The calling thread's OpenMP thread count, kept across a computation.

OpenMP's thread count is a per-thread setting. ggml's BLAS backend sets OpenBLAS's count before each
of its graphs (with OpenBLAS's OpenMP build: the OpenMP count of the thread computing the graph,
which is the caller) and leaves it so. PyTorch's wheel ships a libgomp.so.1 that, when OpenBLAS's
libgomp.so.1 was loaded first, binds to that same runtime: torch's own parallel regions would then
run on as many threads as ggmlpy's last graph did. `openmp_count_kept()` gives the caller its count
back after a computation (ggmlpy's own kernels do the same for their ops: kernels/blas_threads.h).
"""
from __future__ import annotations

import contextlib
import ctypes
import os

__all__ = ["openmp_count_kept"]

_runtime: list = []  # GNU OpenMP, once the process has loaded it (libggml's OpenBLAS loads it at import)


def _loaded():
    if not _runtime:
        try:
            # ctypes, not a cffi cdef: an import of ggmlpy never loads cffi's parser (test_bindings)
            _runtime.append(ctypes.CDLL("libgomp.so.1", mode=os.RTLD_NOLOAD | os.RTLD_LAZY))
        except OSError:  # not loaded (a sequential or no OpenBLAS): nothing for others to share
            return None
    return _runtime[0]


@contextlib.contextmanager
def openmp_count_kept():
    """Restore the calling thread's OpenMP thread count when the block is left."""
    omp = _loaded()
    before = omp.omp_get_max_threads() if omp is not None else 0
    try:
        yield
    finally:
        if before and omp.omp_get_max_threads() != before:
            omp.omp_set_num_threads(before)
