"""The single-cell engines' host kernels (ggmlpy/kernels/singlecell.c) on numpy's buffers, each
call's rows split over ggmlpy's threads (get_num_threads): LogNormalize's passes over a
compressed sparse matrix, the exact kNN's selection of a block of rows, and the
shared-nearest-neighbour graph. `available()` is False where the library cannot be built (no C
compiler, GGMLPY_KERNELS=0): the engines then compute with numpy and scipy alone."""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..core.threads import get_num_threads
from ..errors import GGMLError
from ..kernels import host_library

_ROWS = "int64_t lo, int64_t hi"
DECLARATIONS = "\n".join(
    [f"int ggmlpy_row_sums_{s}(const {t} *data, const {i} *indices, const {i} *indptr, {_ROWS}, double *sums);\n"
     f"void ggmlpy_row_scale_{s}({t} *data, const {i} *indptr, {_ROWS}, const {t} *factor);"
     for t, i, s in (("float", "int32_t", "f32_i32"), ("float", "int64_t", "f32_i64"),
                     ("double", "int32_t", "f64_i32"), ("double", "int64_t", "f64_i64"))]
    + ["int ggmlpy_knn_kth(const float *part, int64_t m, int64_t ncols, int64_t self0, int k, double *kth);",
       "int ggmlpy_knn_select(int nparts, const float *const *parts, const int64_t *ncols, "
       "const int64_t *const *colmap, int64_t m, int64_t row0, const double *kth, const double *err, "
       "const double *x, int64_t dims, const int64_t *rank, int k, int64_t *out_idx, double *out_dist);",
       f"int ggmlpy_snn_rows(const int64_t *nbr, int64_t n, int kk, const int64_t *rev_ptr, const int64_t *rev_idx, "
       f"{_ROWS}, double prune, int64_t *row_nnz, const int64_t *out_ptr, int32_t *cols32, int64_t *cols64, "
       "double *vals);",
       "void ggmlpy_reverse_lists(const int64_t *nbr, int64_t n, int kk, int64_t *rev_ptr, int64_t *rev_idx);"])

_SUFFIX = {(np.dtype(np.float32), np.dtype(np.int32)): "f32_i32", (np.dtype(np.float32), np.dtype(np.int64)): "f32_i64",
           (np.dtype(np.float64), np.dtype(np.int32)): "f64_i32", (np.dtype(np.float64), np.dtype(np.int64)): "f64_i64"}
_pool: dict = {}   # n threads -> the executor that runs the calls beyond the first


def _library():
    return host_library("singlecell.c", DECLARATIONS)


def available() -> bool:
    return _library() is not None


_CHUNKS_A_THREAD = 4   # a busy core's thread takes fewer chunks, the others more: no range waits on it


def _ranges(n: int, weights: np.ndarray | None = None, split: bool = True) -> list[tuple[int, int]]:
    """[lo, hi) row ranges of about equal work for the threads, a few a thread (one in all
    without split); weights: each row's cumulative work, n + 1 entries from 0, as a compressed
    matrix's indptr."""
    parts = max(1, min(get_num_threads() * _CHUNKS_A_THREAD if split else 1, n))
    if weights is None or weights[-1] == 0:
        cuts = np.linspace(0, n, parts + 1).round().astype(np.int64)
    else:
        cuts = np.searchsorted(weights, np.linspace(0, weights[-1], parts + 1)).clip(0, n)
        cuts[0], cuts[-1] = 0, n
    return [(int(a), int(b)) for a, b in zip(cuts[:-1], cuts[1:]) if b > a]


def _executor(workers: int) -> ThreadPoolExecutor:
    pool = _pool.get(workers)
    if pool is None:
        pool = _pool[workers] = ThreadPoolExecutor(workers, thread_name_prefix="ggmlpy-sc")
    return pool


def _in_threads(fn, ranges):
    """fn(lo, hi) for each range, the calling thread and get_num_threads() - 1 others each
    taking the next range as they finish one; the results in the ranges' order."""
    threads = min(get_num_threads(), len(ranges))
    if threads <= 1:
        return [fn(*r) for r in ranges]
    results, order, lock = [None] * len(ranges), iter(range(len(ranges))), threading.Lock()

    def worker():
        while True:
            with lock:
                i = next(order, None)
            if i is None:
                return
            results[i] = fn(*ranges[i])

    others = [_executor(threads - 1).submit(worker) for _ in range(threads - 1)]
    worker()
    for f in others:
        f.result()
    return results


def map_in_threads(fn, items: list) -> None:
    """fn(item) for every item, over get_num_threads() threads taking the next item as they
    finish one (fn's own calls here must not split: split=False); the first error raised."""
    workers = min(get_num_threads(), len(items))
    if workers <= 1:
        for item in items:
            fn(item)
        return
    for f in [_executor(workers).submit(fn, item) for item in items]:
        f.result()


def _ptr(ffi, a: np.ndarray, ctype: str):
    return ffi.cast(ctype, a.ctypes.data)


def lognormalize_in_place(data: np.ndarray, indices: np.ndarray, indptr: np.ndarray, scale_factor: float) -> bool:
    """log1p(value * scale_factor / its row's sum) for every stored value of a compressed matrix
    (rows = cells), in place in `data`; an empty row stays empty. Returns False, having changed
    nothing, when a row's indices do not ascend strictly (a duplicate would need summing first)
    or the kernels are unavailable or the dtypes are not theirs."""
    lib_ = _library()
    suffix = _SUFFIX.get((data.dtype, indices.dtype))
    if lib_ is None or suffix is None or indptr.dtype != indices.dtype or not (
            data.flags.c_contiguous and indices.flags.c_contiguous and indptr.flags.c_contiguous):
        return False
    ffi, lib = lib_
    n = indptr.size - 1
    ranges = _ranges(n, indptr)
    sums = np.empty(n)
    ctype, itype = ("float *" if data.dtype == np.float32 else "double *"), f"{indices.dtype.name}_t *"
    sum_fn, scale_fn = getattr(lib, f"ggmlpy_row_sums_{suffix}"), getattr(lib, f"ggmlpy_row_scale_{suffix}")
    d, i, p = _ptr(ffi, data, ctype), _ptr(ffi, indices, itype), _ptr(ffi, indptr, itype)
    if not all(_in_threads(lambda lo, hi: sum_fn(d, i, p, lo, hi, _ptr(ffi, sums[lo:], "double *")), ranges)):
        return False
    sums[sums == 0] = 1.0
    factor = (float(scale_factor) / sums).astype(data.dtype)
    f = _ptr(ffi, factor, ctype)
    _in_threads(lambda lo, hi: scale_fn(d, p, lo, hi, f), ranges)
    # numpy's log1p is vectorised (glibc's log1pf is not); it releases the GIL over a slice
    _in_threads(lambda lo, hi: np.log1p(data[indptr[lo]:indptr[hi]], out=data[indptr[lo]:indptr[hi]]), ranges)
    return True


def _check(status: int, what: str) -> None:
    if status == -1:
        raise MemoryError(f"{what}: out of memory")
    if status:
        raise GGMLError(f"{what}: the kernel's bound did not hold (status {status}); please report it")


def knn_kth(part: np.ndarray, self0: int, k: int, split: bool = True) -> np.ndarray:
    """Each row's k-th smallest of `part` (m x ncols float32, C order), the column self0 + r of
    row r left out (it is the row itself); split: the rows over the threads (else on the calling
    thread alone, as a caller that runs its own threads wants)."""
    ffi, lib = _library()
    part = np.ascontiguousarray(part, dtype=np.float32)
    m, ncols = part.shape
    kth = np.empty(m)
    p, out = _ptr(ffi, part, "float *"), _ptr(ffi, kth, "double *")
    for status in _in_threads(lambda lo, hi: lib.ggmlpy_knn_kth(p + lo * ncols, hi - lo, ncols, self0 + lo, k,
                                                                 out + lo), _ranges(m, split=split)):
        _check(status, "kNN")
    return kth


def knn_select(parts: list[tuple[np.ndarray, np.ndarray]], row0: int, kth: np.ndarray, err: np.ndarray,
               x: np.ndarray, rank: np.ndarray, k: int, split: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """The exact k nearest of rows row0, row0 + 1, ... (one a kth entry) of x (float64, C
    order): parts are (approximate values m x ncols float32, the columns' rows of x), every true
    neighbour in one of them; kth within err of an upper bound of each row's true k-th; ties by
    rank (the original indices). Indices into x and distances, nearest first; split as knn_kth's."""
    ffi, lib = _library()
    m = kth.size
    x, rank = np.ascontiguousarray(x, dtype=np.float64), np.ascontiguousarray(rank, dtype=np.int64)
    kth, err = np.ascontiguousarray(kth, dtype=np.float64), np.ascontiguousarray(err, dtype=np.float64)
    out_idx, out_dist = np.empty((m, k), dtype=np.int64), np.empty((m, k))
    keep = [(np.ascontiguousarray(p, dtype=np.float32), np.ascontiguousarray(c, dtype=np.int64)) for p, c in parts]
    ncols = np.array([p.shape[1] for p, _ in keep], dtype=np.int64)
    maps = ffi.new("int64_t *[]", [_ptr(ffi, c, "int64_t *") for _, c in keep])
    args = (_ptr(ffi, x, "double *"), x.shape[1], _ptr(ffi, rank, "int64_t *"), k)
    kth_p, err_p = _ptr(ffi, kth, "double *"), _ptr(ffi, err, "double *")
    idx_p, dist_p = _ptr(ffi, out_idx, "int64_t *"), _ptr(ffi, out_dist, "double *")

    def rows(lo, hi):
        ptrs = ffi.new("float *[]", [_ptr(ffi, p, "float *") + lo * p.shape[1] for p, _ in keep])
        return lib.ggmlpy_knn_select(len(keep), ptrs, _ptr(ffi, ncols, "int64_t *"), maps, hi - lo, row0 + lo,
                                     kth_p + lo, err_p + lo, *args, idx_p + lo * k, dist_p + lo * k)

    for status in _in_threads(rows, _ranges(m, split=split)):
        _check(status, "kNN")
    return out_idx, out_dist


def snn_graph(idx: np.ndarray, prune: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The shared-nearest-neighbour graph of the kNN `idx` (n x k, each row's k nearest others):
    (data, indices, indptr) of the n x n CSR matrix of Jaccard overlaps |N(i) & N(j)| /
    |N(i) | N(j)|, N(i) = i and its k nearest, those below `prune` left out, columns ascending."""
    ffi, lib = _library()
    n, k = idx.shape
    nbr = np.empty((n, k + 1), dtype=np.int64)
    nbr[:, 0], nbr[:, 1:] = np.arange(n), idx
    rev_ptr, rev_idx = np.empty(n + 1, dtype=np.int64), np.empty(n * (k + 1), dtype=np.int64)
    lib.ggmlpy_reverse_lists(_ptr(ffi, nbr, "int64_t *"), n, k + 1, _ptr(ffi, rev_ptr, "int64_t *"),
                             _ptr(ffi, rev_idx, "int64_t *"))
    row_nnz = np.empty(n, dtype=np.int64)
    args = (_ptr(ffi, nbr, "int64_t *"), n, k + 1, _ptr(ffi, rev_ptr, "int64_t *"), _ptr(ffi, rev_idx, "int64_t *"))
    ranges = _ranges(n)
    nnz_p = _ptr(ffi, row_nnz, "int64_t *")
    for status in _in_threads(lambda lo, hi: lib.ggmlpy_snn_rows(*args, lo, hi, float(prune), nnz_p + lo,
                                                                  ffi.NULL, ffi.NULL, ffi.NULL, ffi.NULL), ranges):
        _check(status, "SNN")
    nnz = int(row_nnz.sum())
    index = np.int32 if max(n, nnz) < 2 ** 31 else np.int64   # scipy's own choice: no conversion after
    indptr = np.zeros(n + 1, dtype=index)
    np.cumsum(row_nnz, out=indptr[1:])
    starts = indptr.astype(np.int64, copy=False)
    cols, vals = np.empty(nnz, dtype=index), np.empty(nnz)
    col_p = _ptr(ffi, cols, "int32_t *" if index is np.int32 else "int64_t *")
    fill = (_ptr(ffi, starts, "int64_t *"), *((col_p, ffi.NULL) if index is np.int32 else (ffi.NULL, col_p)),
            _ptr(ffi, vals, "double *"))
    for status in _in_threads(lambda lo, hi: lib.ggmlpy_snn_rows(*args, lo, hi, float(prune), nnz_p + lo, *fill),
                              ranges):
        _check(status, "SNN")
    return vals, cols, indptr
