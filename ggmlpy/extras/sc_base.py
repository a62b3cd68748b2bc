"""What the single-cell engines share (singlecell.py registers them, sc_umap.py is one): ggmlR's
result type, the sparse-matrix test, matrix products on the requested device and the exact kNN."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import GGMLError
from .linalg import ggml_tcrossprod


def _issparse(x) -> bool:
    try:
        import scipy.sparse as sp  # optional dependency: without scipy nothing is sparse
    except ImportError:
        return False
    return sp.issparse(x)


@dataclass
class GGMLResult:
    """ggmlR's ggml_result: the embedding (cells x components for "embed", the transformed
    matrix for "normalize"/"scale", per-cell columns for "largest_gene"), metadata (backend used,
    stdev, loadings, ...) and timings (seconds per stage)."""
    embedding: object
    metadata: dict = field(default_factory=dict)
    timings: dict = field(default_factory=dict)

    def __getitem__(self, key):
        return getattr(self, key)

    def __repr__(self):
        shape = getattr(self.embedding, "shape", None)
        what = f"{shape[0]} x {shape[1]}" if shape is not None and len(shape) == 2 else type(self.embedding).__name__
        return f"<ggml_result> embedding={what}  backend={self.metadata.get('backend', 'unknown')}"


def _product(backend, x, y_t):
    """x @ y_t.T: ggml's mul_mat on the Vulkan device, or float64 on the host."""
    return ggml_tcrossprod(x, y_t, device="gpu" if backend == "vulkan" else "cpu")


# ggml's Vulkan mul_mat rounds f32 inputs to f16: measured |error| of a.b up to 2^-10.3 |a||b| on
# lavapipe (ggmlR measured the same on RADV). 2^-8 bounds it with a margin of 4, plus f32 accumulation.
_VULKAN_DOT_REL_ERR = 2.0 ** -8


# float32 rounding of a length-m dot product a.b is at most m * 2^-24 * sum |a_t b_t| (Higham's
# gamma_m); the margin below takes it with a factor 2 to spare, plus the additions around it.
_F32_UNIT = 2.0 ** -24
_BOUND_SAMPLE = 2048     # columns whose k-th nearest bounds a row's k-th nearest from above


def _knn(x, k, backend, block=2048):
    """Exact k nearest neighbours of every row of x (cells x features), self excluded: indices
    and Euclidean distances, nearest first (ties by index). Under backend "vulkan" the distance
    products run on the Vulkan device (_knn_vulkan); on the host, _knn_host."""
    x = np.asarray(x, dtype=np.float64)
    if not np.isfinite(x).all():
        raise GGMLError("kNN: the feature matrix has NaN or infinite values")
    if backend == "vulkan":
        return _knn_vulkan(x, k, block)
    return _knn_host(x, k)


def _exact_top_k(x, lo, rows, cols, k, n_rows):
    """For candidate pairs (lo + rows, cols), every one of rows 0..n_rows-1 holding at least k
    of them: the k nearest per row by the exact float64 distance sum((a - b)^2), ties by index."""
    d2 = np.empty(rows.size)
    step = max(1, (1 << 22) // max(x.shape[1], 1))       # bound the gathered differences' memory
    for s in range(0, rows.size, step):
        diff = x[lo + rows[s:s + step]] - x[cols[s:s + step]]
        d2[s:s + step] = np.einsum("ij,ij->i", diff, diff)
    order = np.lexsort((cols, d2, rows))
    first = np.searchsorted(rows[order], np.arange(n_rows))
    pick = order[first[:, None] + np.arange(k)]
    return cols[pick], np.sqrt(d2[pick])


def _knn_host(x, k):
    """The exact kNN from float32 products (BLAS), pruned before any sort. For a block of rows,
    one product gives every approximate squared distance less the row's own norm; the k-th
    smallest over a fixed sample of columns, plus twice the rounding bound, is above the true
    k-th distance, so the columns under it hold every true neighbour (k * n / sample of them
    on average). Among those, the ones within twice the bound of the approximate k-th are the
    only ones that can be in the true k nearest: their distances are recomputed exactly in
    float64 and sorted. The answer is the exact kNN whatever the float32 rounding."""
    n, dims = x.shape
    x = x - x.mean(axis=0)                                # distances unchanged, smaller norms and error
    sq = np.einsum("ij,ij->i", x, x)
    norm = np.sqrt(sq)
    # [x_i, 1] . [-2 x_j, |x_j|^2] = |x_i - x_j|^2 - |x_i|^2
    left = np.hstack([x, np.ones((n, 1))]).astype(np.float32)
    right = np.hstack([-2.0 * x, sq[:, None]]).astype(np.float32)
    gamma = 2.0 * (dims + 4) * _F32_UNIT
    # |rounding| <= gamma * (2 |x_i| |x_j| + |x_j|^2), plus the inputs' own float32 rounding (in gamma)
    err = gamma * (2.0 * norm * norm.max() + sq.max()) + 1e-30
    sample = np.arange(n) if n <= _BOUND_SAMPLE + k else np.linspace(0, n - 1, _BOUND_SAMPLE).astype(np.int64)
    idx, dist = np.empty((n, k), dtype=np.int64), np.empty((n, k))
    block = max(1, min(n, (1 << 25) // n))                # rows per block: at most 2^25 distances held
    for lo in range(0, n, block):
        hi = min(lo + block, n)
        m = hi - lo
        a = left[lo:hi] @ right.T                         # (m, n) float32
        a[np.arange(m), np.arange(lo, hi)] = np.inf       # not one's own neighbour
        e = err[lo:hi]
        kth = np.partition(a[:, sample], k - 1, axis=1)[:, k - 1]
        r, c = np.nonzero(a <= (kth + 2.0 * e)[:, None])  # every true k nearest, sorted by row
        v = a[r, c]
        order = np.lexsort((v, r))
        r, c, v = r[order], c[order], v[order]
        first = np.searchsorted(r, np.arange(m))
        near = v[first + k - 1]                           # each row's approximate k-th
        keep = v <= near[r] + 2.0 * e[r]
        idx[lo:hi], dist[lo:hi] = _exact_top_k(x, lo, r[keep], c[keep], k, m)
    return idx, dist


def _knn_vulkan(x, k, block):
    """The Vulkan device's f16-rounded products (ggmlR's finding: they can reorder near
    neighbours) only select candidates, every point whose distance can be within the error
    bound of the k-th, and the candidates' distances are recomputed exactly on the host, so the
    answer is the exact kNN. Squared distances come from |a|^2 + |b|^2 - 2 a.b in row blocks,
    so that at most block x n distances are held."""
    n, dims = x.shape
    x = x - x.mean(axis=0)                                # distances unchanged, smaller norms and error
    norm = np.sqrt((x * x).sum(axis=1))
    rel = _VULKAN_DOT_REL_ERR + dims * 2.0 ** -22
    sq = (x * x).sum(axis=1)
    idx, dist = np.empty((n, k), dtype=np.int64), np.empty((n, k))
    for lo in range(0, n, block):
        rows = slice(lo, min(lo + block, n))
        m = rows.stop - lo
        d2 = sq[rows, None] + sq[None, :] - 2.0 * _product("vulkan", x[rows], x)
        d2[np.arange(m), np.arange(lo, rows.stop)] = np.inf     # not one's own neighbour
        err = 2.0 * rel * norm[rows, None] * norm[None, :]
        upper = np.partition(d2 + err, k - 1, axis=1)[:, k - 1:k]   # >= the true k-th distance
        r, c = np.nonzero(d2 - err <= upper)                # holds every true k nearest
        d2 = np.full((m, n), np.inf)
        step = max(1, (1 << 22) // max(dims, 1))          # bound the gathered differences' memory
        for s in range(0, r.size, step):
            diff = x[lo + r[s:s + step]] - x[c[s:s + step]]
            d2[r[s:s + step], c[s:s + step]] = (diff * diff).sum(axis=1)
        part = np.argpartition(d2, k - 1, axis=1)[:, :k] if k < n else np.argsort(d2, axis=1)[:, :k]
        pd = np.take_along_axis(d2, part, axis=1)
        order = np.lexsort((part, pd), axis=1)
        idx[rows] = np.take_along_axis(part, order, axis=1)
        dist[rows] = np.sqrt(np.maximum(np.take_along_axis(pd, order, axis=1), 0.0))
    return idx, dist
