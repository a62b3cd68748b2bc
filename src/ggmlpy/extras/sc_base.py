"""What the single-cell engines share (singlecell.py registers them, sc_umap.py is one): ggmlR's
result type, the sparse-matrix test, matrix products on the requested device and the exact kNN."""
from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field

import numpy as np

from ..core.threads import get_num_threads
from ..errors import GGMLError
from . import sc_kernels
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


def _one_blas_thread():
    """A context in which BLAS and LAPACK run on one thread, for the eigensolvers: a tridiagonal
    reduction and ARPACK's reorthogonalisation are memory-bound, and OpenBLAS's spinning
    threads make them several times slower on a busy machine (docs/benchmarks.md)."""
    limit = _blas_threads(1)
    return contextlib.nullcontext() if limit is None else limit


def _blas_threads(n):
    """A context in which BLAS runs on n threads, or None without threadpoolctl."""
    try:
        from threadpoolctl import threadpool_limits  # optional (the anndata extra; ships with scikit-learn)
    except ImportError:
        return None
    return threadpool_limits(n, user_api="blas")


# float32 rounding of a length-m dot product a.b is at most m * 2^-24 * sum |a_t b_t| (Higham's
# gamma_m); the margin below takes it with a factor 2 to spare, plus the additions around it.
_F32_UNIT = 2.0 ** -24


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


def _exact_top_k(x, lo, rows, cols, k, n_rows, rank):
    """For candidate pairs (lo + rows, cols), every one of rows 0..n_rows-1 holding at least k
    of them: the k nearest per row by the exact float64 distance sum((a - b)^2), ties by
    rank[cols] (the original indices)."""
    d2 = np.empty(rows.size)
    step = max(1, (1 << 22) // max(x.shape[1], 1))       # bound the gathered differences' memory
    for s in range(0, rows.size, step):
        diff = x[lo + rows[s:s + step]] - x[cols[s:s + step]]
        d2[s:s + step] = np.einsum("ij,ij->i", diff, diff)
    order = np.lexsort((rank[cols], d2, rows))
    first = np.searchsorted(rows[order], np.arange(n_rows))
    pick = order[first[:, None] + np.arange(k)]
    return cols[pick], np.sqrt(d2[pick])


def _knn_host(x, k):
    """The exact kNN from float32 products (BLAS), pruned twice before any sort.

    Coarse clusters first (_coarse_clusters): a block of one cluster's rows is compared with its
    own cluster, whose k-th nearest bounds each row's true k-th nearest from above, then only
    with the clusters that can hold a neighbour: another cluster is left out when, along the
    line between the two clusters' centres, all of it lies further than that bound from every
    row of the block (a distance is at least its projection on a unit vector). The clusters only
    decide the speed, never the answer.

    One product gives every approximate squared distance less the row's own norm; the columns
    under the bound, plus twice the float32 rounding bound, hold every true neighbour, and of
    those only the ones within twice the rounding bound of the approximate k-th can be among the
    true k nearest: their distances are recomputed exactly in float64 and sorted (_exact_top_k).
    The answer is the exact kNN whatever the rounding.

    With the kernels (sc_kernels: the k-th, the candidates and their exact distances in C) and
    threadpoolctl, blocks of 256 rows run on ggmlpy's threads, each product on one BLAS thread
    into a buffer the thread reuses; otherwise block after block, numpy's selection."""
    n, dims = x.shape
    x = x - x.mean(axis=0)                                # distances unchanged, smaller norms and error
    labels, centres = _coarse_clusters(x, k)
    perm = np.argsort(labels, kind="stable")              # each cluster's rows contiguous
    xp, labels = x[perm], labels[perm]
    del x                                                 # (fresh memory is dear: each copy gone when done)
    sq = np.einsum("ij,ij->i", xp, xp)
    norm = np.sqrt(sq)
    # [x_i, 1] . [-2 x_j, |x_j|^2] = |x_i - x_j|^2 - |x_i|^2, built in float32 directly
    left, right = np.empty((n, dims + 1), dtype=np.float32), np.empty((n, dims + 1), dtype=np.float32)
    left[:, :dims], left[:, dims] = xp, 1.0
    np.multiply(xp, -2.0, out=right[:, :dims], casting="same_kind")
    right[:, dims] = sq
    gamma = 2.0 * (dims + 4) * _F32_UNIT
    # |rounding| <= gamma * (2 |x_i| |x_j| + |x_j|^2), the inputs' own float32 rounding included
    err = gamma * (2.0 * norm * norm.max() + sq.max()) + 1e-30
    n_clusters = centres.shape[0]
    starts = np.searchsorted(labels, np.arange(n_clusters + 1))
    sizes = np.diff(starts)
    idx, dist = np.empty((n, k), dtype=np.int64), np.empty((n, k))
    kernels = sc_kernels.available()
    blocks, reach_of = [], {}
    for a in np.flatnonzero(sizes):
        own = (starts[a], starts[a + 1])
        if sizes[a] <= k:                                 # too few to bound the k-th: the whole matrix
            own = (0, n)
        towards = centres - centres[a]
        length = np.linalg.norm(towards, axis=1)
        length[length == 0] = np.inf
        proj = xp @ (towards / length[:, None]).T         # (n, n_clusters): on each unit vector from a
        # each cluster's least projection on the direction towards it (empty ones are never read)
        low = np.minimum.reduceat(proj, starts[:-1].clip(max=n - 1), axis=0).diagonal()
        reach_of[a] = (own, low, proj[starts[a]:starts[a + 1]].copy())   # the block rows' own projections
        step = max(1, min(256, (1 << 24) // max(own[1] - own[0], 1)))   # a block's product stays in cache
        blocks += [(a, lo, min(lo + step, starts[a + 1])) for lo in range(starts[a], starts[a + 1], step)]
    buffers = threading.local()                           # each thread's product buffers, reused block to block

    def product(rows, cols, slot):
        """left[rows] . right[cols]^T (float32) into this thread's buffer `slot`."""
        b = right[cols]
        m, c = rows.stop - rows.start, b.shape[0]
        held = getattr(buffers, slot, None)
        if held is None or held.size < m * c:
            held = np.empty(max(m * c, 1 << 20), dtype=np.float32)
            setattr(buffers, slot, held)
        return np.matmul(left[rows], b.T, out=held[:m * c].reshape(m, c))

    def block(task):
        a, lo, hi = task
        own, low, proj_a = reach_of[a]
        rows = slice(lo, hi)
        own_part = product(rows, slice(*own), "own")
        kth = _own_kth(own_part, lo - own[0], k, kernels, split=not parallel)
        others = np.zeros(0, dtype=np.int64)
        if own != (0, n):
            reach = np.sqrt(np.maximum(kth + sq[rows] + 3.0 * err[rows], 0.0)) * (1 + 1e-9)
            needed = ((low[None, :] - proj_a[lo - starts[a]:hi - starts[a]]) <= reach[:, None]).any(axis=0) & (sizes > 0)
            needed[a] = False
            others = np.flatnonzero(needed)
        if kernels:
            parts = [(own_part, np.arange(*own))]
            if others.size:
                cols = np.concatenate([np.arange(starts[b], starts[b + 1]) for b in others])
                parts.append((product(rows, cols, "other"), cols))
            idx[rows], dist[rows] = sc_kernels.knn_select(parts, lo, kth, err[rows], xp, perm, k, split=not parallel)
        else:
            parts = [(own[0], own_part)] + [(starts[b], left[rows] @ right[starts[b]:starts[b + 1]].T)
                                            for b in others]
            idx[rows], dist[rows] = _rows_knn(xp, lo, parts, kth, err[rows], k, perm)

    # with the kernels, whole blocks run on the threads, each product on one BLAS thread: no
    # phase waits for another, no BLAS thread spins while a kernel runs
    one_blas = _blas_threads(1) if kernels and get_num_threads() > 1 else None
    parallel = one_blas is not None
    with one_blas or contextlib.nullcontext():
        if parallel:
            sc_kernels.map_in_threads(block, blocks)
        else:
            for task in blocks:
                block(task)
    out_idx, out_dist = np.empty_like(idx), np.empty_like(dist)
    out_idx[perm], out_dist[perm] = perm[idx], dist
    return out_idx, out_dist


def _own_kth(own_part, self0, k, kernels, split=True):
    """Each row's approximate k-th from its own cluster's part, the row itself (column self0 + r
    of row r) left out."""
    if kernels:
        return sc_kernels.knn_kth(own_part, self0, k, split=split)
    m = own_part.shape[0]
    own_part[np.arange(m), self0 + np.arange(m)] = np.inf   # not one's own neighbour
    return np.partition(own_part, k - 1, axis=1)[:, k - 1].astype(np.float64)


def _rows_knn(xp, lo, parts, kth, e, k, rank):
    """The exact k nearest of rows lo, lo + 1, ... (one per entry of kth) from `parts`, (first
    column, approximate distances less |x_i|^2) covering every true neighbour; kth: an
    approximate k-th within e of an upper bound of the true k-th."""
    m = kth.size
    threshold = kth + 2.0 * e
    rs, cs, vs = [], [], []
    for first, part in parts:
        hit = np.flatnonzero(part.min(axis=1) <= threshold)   # most rows have nothing in another cluster
        if hit.size == 0:
            continue
        sub = part[hit] if hit.size < m else part
        flat = np.flatnonzero(sub <= threshold[hit, None])
        r, c = np.divmod(flat, sub.shape[1])
        rs.append(hit[r]), cs.append(c + first), vs.append(sub.ravel()[flat])
    r, c, v = np.concatenate(rs), np.concatenate(cs), np.concatenate(vs)
    order = np.lexsort((v, r))
    r, c, v = r[order], c[order], v[order]
    first = np.searchsorted(r, np.arange(m))
    near = v[first + k - 1]                               # each row's approximate k-th
    keep = v <= near[r] + 2.0 * e[r]
    return _exact_top_k(xp, lo, r[keep], c[keep], k, m, rank)


def _coarse_clusters(x, k, max_clusters=16, sample=4096, iters=8):
    """Labels and centres of a few k-means clusters (seeded k-means++ and Lloyd steps on a
    sample, then every row to its nearest centre): n // 2 048 of them, at most 16, one below 4 096 rows."""
    n = x.shape[0]
    n_clusters = int(min(max_clusters, n // 2048))
    if n_clusters < 2:
        return np.zeros(n, dtype=np.int64), x.mean(axis=0, keepdims=True)
    rng = np.random.default_rng(0)
    s = x[rng.choice(n, min(sample, n), replace=False)]
    centres = [s[rng.integers(s.shape[0])]]
    d2 = ((s - centres[0]) ** 2).sum(axis=1)
    for _ in range(1, n_clusters):
        centres.append(s[rng.choice(s.shape[0], p=d2 / d2.sum()) if d2.sum() > 0 else rng.integers(s.shape[0])])
        d2 = np.minimum(d2, ((s - centres[-1]) ** 2).sum(axis=1))
    centres = np.array(centres)

    def nearest(pts):
        return np.argmin((centres ** 2).sum(axis=1)[None, :] - 2.0 * pts @ centres.T, axis=1)

    for _ in range(iters):
        lab = nearest(s)
        for c in range(n_clusters):
            if np.any(lab == c):
                centres[c] = s[lab == c].mean(axis=0)
    return nearest(x).astype(np.int64), centres


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
