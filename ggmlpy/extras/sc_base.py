"""What the single-cell engines share (singlecell.py registers them, sc_umap.py is one): ggmlR's
result type, the sparse-matrix test, matrix products on the requested device and the exact kNN."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

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


def _knn(x, k, backend, block=2048):
    """Exact k nearest neighbours of every row of x (cells x features), self excluded: indices
    and Euclidean distances, nearest first (ties by index). Squared distances come from
    |a|^2 + |b|^2 - 2 a.b in row blocks, so that at most block x n distances are held. Under
    backend "vulkan" the products run on the Vulkan device, whose f16 rounding can reorder near
    neighbours (ggmlR's finding): they only select candidates, every point whose distance can
    be within the error bound of the k-th, and the candidates' distances are recomputed exactly
    on the host, so the answer is the exact kNN on either path."""
    n, dims = x.shape
    if backend == "vulkan":
        x = x - x.mean(axis=0)                                # distances unchanged, smaller norms and error
        norm = np.sqrt((x * x).sum(axis=1))
        rel = _VULKAN_DOT_REL_ERR + dims * 2.0 ** -22
    sq = (x * x).sum(axis=1)
    idx, dist = np.empty((n, k), dtype=np.int64), np.empty((n, k))
    for lo in range(0, n, block):
        rows = slice(lo, min(lo + block, n))
        m = rows.stop - lo
        d2 = sq[rows, None] + sq[None, :] - 2.0 * _product(backend, x[rows], x)
        d2[np.arange(m), np.arange(lo, rows.stop)] = np.inf     # not one's own neighbour
        if backend == "vulkan":
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
