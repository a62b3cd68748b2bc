"""ggmlR's UMAP engine (op "umap" of the single-cell task API), on the CPU in numpy.

Three phases, with ggmlR's numerics (R/sc_umap.R, src/r_umap_sgd.c):
1. exact kNN (Euclidean, self excluded; the neighbors engine's `_knn`),
2. the fuzzy simplicial set: per cell rho (nearest distance) and sigma (bisection until the
   memberships sum to log2(k)), memberships exp(-max(d - rho, 0) / sigma), symmetrised by the
   probabilistic t-conorm W + W' - W*W', upper triangle, edges with weight > 1e-3,
3. the layout: spectral initialisation (normalised adjacency's leading eigenvectors, scaled to
   +/-10, jitter sd 1e-3; uniform(-10, 10) if that fails), then ggmlR's SGD: per epoch, the
   edges whose floor(epoch * w) crosses an integer (w normalised to max 1) attract their ends
   with -2ab d^(2(b-1)) / (1 + a d^(2b)), and each repels `n_neg` negatives drawn with ggmlR's
   PCG hash (seed ^ e * 0x9e3779b9, seed = base_seed + epoch - 1) with
   2 gamma b / ((1e-3 + d^2)(1 + a d^(2b))); gradients clipped to [-4, 4], learning rate
   alpha0 * (1 - (epoch - 1) / n_epochs); a/b fitted to min_dist/spread by least squares.

`sgd_method="sequential"` is ggmlR's C loop, edge after edge with in-place updates (its exact
numbers, slow in Python). The default `"epoch"` vectorises each epoch: every fired edge's
attraction is computed from the positions at the start of the epoch and summed, then every
negative's repulsion from the positions after it: a synchronous version of the same schedule,
like ggmlR's Hogwild GPU shader identical to the sequential loop where no two updates share a
point (see tests/ggmlr/test_sc_umap.py), a close but different layout otherwise.

ggmlR's Vulkan paths (pairwise_dist.comp, knn_tiled.comp, umap_sgd.comp) are shaders of its own
ggml fork; ggmlpy's pinned ggml has none of them, so every phase runs on the CPU: asking for
`sgd_backend="vulkan"` or `knn_backend="vulkan"` falls back to the CPU as ggmlR does when its
GPU declines, with a RuntimeWarning, and the metadata says "cpu".
"""
from __future__ import annotations

import math
import time
import warnings

import numpy as np

from ..errors import GGMLError
from .sc_base import GGMLResult, _issparse, _knn, _one_blas_thread

__all__ = ["umap_find_ab", "umap_knn", "umap_fuzzy_graph", "umap_spectral_init", "umap_sgd", "umap_pcg_hash"]

_GOLDEN = 0x9E3779B9
_UWOT_AB = (1.577, 0.895)   # ggmlR's fallback when the curve fit fails (uwot's defaults)


def umap_find_ab(spread: float = 1.0, min_dist: float = 0.1) -> tuple:
    """UMAP's a, b: least-squares fit of 1 / (1 + a x^(2b)) to the membership curve (1 below
    min_dist, exp(-(x - min_dist) / spread) above) on 300 points of [0, 3 spread]; ggmlR's
    fallback (1.577, 0.895) when the fit fails."""
    from scipy.optimize import curve_fit  # optional dependency (scipy), loaded on first use
    x = np.linspace(0.0, spread * 3.0, 300)
    y = np.where(x < min_dist, 1.0, np.exp(-(x - min_dist) / spread))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            (a, b), _ = curve_fit(lambda d, a, b: 1.0 / (1.0 + a * d ** (2.0 * b)), x, y, p0=(1.0, 1.0),
                                  maxfev=2000)
    except (RuntimeError, ValueError):
        return _UWOT_AB
    if not (np.isfinite(a) and np.isfinite(b)):
        return _UWOT_AB
    return float(a), float(b)


def umap_pcg_hash(x: "np.ndarray | int") -> np.ndarray:
    """ggmlR's PCG hash on uint32 (wrapping arithmetic), elementwise."""
    s = np.asarray(x, dtype=np.uint32)
    with np.errstate(over="ignore"):
        state = s * np.uint32(747796405) + np.uint32(2891336453)
        word = ((state >> ((state >> np.uint32(28)) + np.uint32(4))) ^ state) * np.uint32(277803737)
    return (word >> np.uint32(22)) ^ word


def umap_knn(x: np.ndarray, n_neighbors: int, knn_backend: str = "cpu") -> dict:
    """Exact k nearest neighbours of each row of x (cells x features), self excluded, nearest
    first: {"idx": n x k (0-based), "dist": n x k Euclidean, "backend": "cpu"}. ggmlR's GPU kNN
    (knn_tiled.comp) is its fork's shader: knn_backend="vulkan" falls back to the CPU, warning."""
    if knn_backend not in ("cpu", "vulkan"):
        raise ValueError(f"knn_backend must be 'cpu' or 'vulkan', got {knn_backend!r}")
    if knn_backend == "vulkan":
        warnings.warn("ggmlpy: ggmlR's GPU kNN shader (knn_tiled.comp) is not in ggml; using the exact CPU kNN.",
                      RuntimeWarning, stacklevel=2)
    x = np.asarray(x, dtype=np.float64)
    n = x.shape[0]
    k = int(n_neighbors)
    if x.ndim != 2 or n < 2 or x.shape[1] < 1:
        raise GGMLError(f"kNN needs at least 2 cells and 1 feature, got shape {x.shape}")
    if not 1 <= k <= n - 1:
        raise GGMLError(f"n_neighbors must be in [1, {n - 1}], got {n_neighbors}")
    idx, dist = _knn(x, k, "cpu")
    return {"idx": idx, "dist": dist, "backend": "cpu"}


def _smooth_sigmas(d: np.ndarray, target: float) -> np.ndarray:
    """ggmlR's bisection on every row at once: sigma with sum(exp(-d / sigma)) = target (64 steps
    at most, a row stops once within 1e-5)."""
    n = d.shape[0]
    lo, hi, mid = np.zeros(n), np.full(n, np.inf), np.ones(n)
    live = np.ones(n, dtype=bool)
    for _ in range(64):
        psum = np.exp(-d / mid[:, None]).sum(axis=1)
        live &= np.abs(psum - target) >= 1e-5
        if not live.any():
            break
        over = live & (psum > target)
        under = live & ~(psum > target)
        hi = np.where(over, mid, hi)
        lo = np.where(under, mid, lo)
        mid = np.where(over, (lo + hi) / 2, np.where(under, np.where(np.isinf(hi), mid * 2, (lo + hi) / 2), mid))
    return mid


def umap_fuzzy_graph(x: np.ndarray, n_neighbors: int = 15, knn_backend: str = "cpu") -> dict:
    """The fuzzy simplicial set of x (cells x features) as ggmlR builds it: {"from", "to"
    (0-based, from < to), "weight" (in (0, 1]), "n", "dist_backend"}."""
    import scipy.sparse as sp  # optional dependency (scipy), loaded on first use
    x = np.asarray(x, dtype=np.float64)
    n = x.shape[0]
    k = int(min(int(n_neighbors), n - 1))
    knn = umap_knn(x, k, knn_backend)
    idx, dist = knn["idx"], knn["dist"]
    rho = dist[:, 0]
    d = np.maximum(dist - rho[:, None], 0.0)
    sigma = _smooth_sigmas(d, math.log2(k))
    w = sp.csr_matrix((np.exp(-d / sigma[:, None]).ravel(), (np.repeat(np.arange(n), k), idx.ravel())),
                      shape=(n, n))
    wt = w.T.tocsr()
    sym = sp.triu(w + wt - w.multiply(wt), k=1).tocoo()
    keep = sym.data > 1e-3
    order = np.lexsort((sym.col[keep], sym.row[keep]))
    return {"from": sym.row[keep][order].astype(np.int64), "to": sym.col[keep][order].astype(np.int64),
            "weight": sym.data[keep][order], "n": n, "dist_backend": knn["backend"]}


def umap_spectral_init(graph: dict, n_components: int = 2, seed: int = 42) -> np.ndarray:
    """ggmlR's initial layout: the leading non-trivial eigenvectors of D^-1/2 W D^-1/2 (W the
    symmetric graph), scaled to +/-10, plus N(0, 1e-3) jitter; uniform(-10, 10) when the graph is
    too small or the eigensolver fails. Seeded by `seed` (numpy's generator, not R's)."""
    import scipy.sparse as sp  # optional dependency (scipy), loaded on first use
    n = graph["n"]
    rng = np.random.default_rng(seed)
    try:
        if n_components + 1 >= n:
            raise ValueError("graph too small for a spectral layout")
        w = sp.csr_matrix((graph["weight"], (graph["from"], graph["to"])), shape=(n, n))
        w = w + w.T
        dh = sp.diags(1.0 / np.sqrt(np.maximum(np.asarray(w.sum(axis=1)).ravel(), np.finfo(float).eps)))
        m = dh @ w @ dh
        if n <= 2000:
            vals, vecs = np.linalg.eigh(m.toarray())
        else:
            from scipy.sparse.linalg import eigsh  # optional (scipy), loaded on first use
            with _one_blas_thread():
                vals, vecs = eigsh(m, k=n_components + 1, which="LA", v0=np.full(n, 1.0 / math.sqrt(n)))
        v = vecs[:, np.argsort(vals)[::-1][1:n_components + 1]]    # drop the trivial leading one
        mx = np.abs(v).max()
        if not np.isfinite(mx) or mx <= 0:
            raise ValueError("degenerate spectral embedding")
        return v / mx * 10 + rng.normal(0.0, 1e-3, size=v.shape)
    except (ValueError, np.linalg.LinAlgError, ArithmeticError):
        return rng.uniform(-10.0, 10.0, size=(n, n_components))
    except Exception as e:   # scipy's ArpackNoConvergence and kin: ggmlR falls back the same way
        if type(e).__module__.startswith("scipy"):
            return rng.uniform(-10.0, 10.0, size=(n, n_components))
        raise


def _norm_weights(w: np.ndarray) -> np.ndarray:
    w = np.asarray(w, dtype=np.float64)
    mx = w.max() if w.size else 0.0
    return w / mx if np.isfinite(mx) and mx > 0 else np.ones_like(w)


def _negatives(epoch_seed: int, edges: "int | np.ndarray", n_neg: int, n: int) -> np.ndarray:
    """The (len(edges), n_neg) negative samples of one epoch for the given edge numbers (all
    `edges` of them when an int): ggmlR's per-edge PCG stream, seeded by the edge's number."""
    edges = np.arange(edges, dtype=np.uint32) if np.isscalar(edges) else np.asarray(edges).astype(np.uint32)
    with np.errstate(over="ignore"):
        rng = np.uint32(epoch_seed) ^ (edges * np.uint32(_GOLDEN))
    out = np.empty((edges.size, n_neg), dtype=np.int64)
    for k in range(n_neg):
        rng = umap_pcg_hash(rng)
        out[:, k] = rng % np.uint32(n)
    return out


def _sgd_epoch_sequential(y, src, dst, negs, a, b, alpha, gamma):
    """ggmlR's C loop over one epoch's fired edges, in place, in edge order."""
    eps, dims = 1e-3, y.shape[1]
    clip = lambda g: -4.0 if g < -4.0 else (4.0 if g > 4.0 else g)   # noqa: E731
    rows = y.tolist()
    for e in range(len(src)):
        i, j = src[e], dst[e]
        yi, yj = rows[i], rows[j]
        dv = [yi[t] - yj[t] for t in range(dims)]
        d2 = sum(v * v for v in dv)
        if d2 > 0.0:
            coef = (-2.0 * a * b * math.pow(d2, b - 1.0)) / (1.0 + a * math.pow(d2, b))
            for t in range(dims):
                g = clip(coef * dv[t]) * alpha
                yi[t] += g
                yj[t] -= g
        for c in negs[e]:
            if c == i:
                continue
            yc = rows[c]
            dv = [yi[t] - yc[t] for t in range(dims)]
            d2 = sum(v * v for v in dv)
            if d2 > 0.0:
                coef = (2.0 * gamma * b) / ((eps + d2) * (1.0 + a * math.pow(d2, b)))
                for t in range(dims):
                    yi[t] += clip(coef * dv[t]) * alpha
            else:
                for t in range(dims):
                    yi[t] += 4.0 * alpha
    y[:] = rows


def _scatter_add(y, at, values):
    """y[at] += values, repeated indices summed (bincount per column: ~10x np.add.at)."""
    for t in range(y.shape[1]):
        y[:, t] += np.bincount(at, weights=values[:, t], minlength=y.shape[0])


def _sgd_epoch_vectorised(y, src, dst, negs, a, b, alpha, gamma):
    """One epoch at once: attraction from the epoch's starting positions, then repulsion."""
    dv = y[src] - y[dst]
    d2 = np.einsum("ij,ij->i", dv, dv)
    pos = d2 > 0
    coef = np.zeros_like(d2)
    p = d2[pos]
    pb = p ** (b - 1.0)
    coef[pos] = (-2.0 * a * b * pb) / (1.0 + a * pb * p)
    g = np.clip(coef[:, None] * dv, -4.0, 4.0)
    g *= alpha
    _scatter_add(y, src, g)
    _scatter_add(y, dst, -g)
    if negs.shape[1] == 0:
        return
    dv = y[src][:, None, :] - y[negs]                                  # (m, n_neg, dims)
    d2 = np.einsum("ijk,ijk->ij", dv, dv)
    pos = d2 > 0
    coef = np.zeros_like(d2)
    p = d2[pos]
    coef[pos] = (2.0 * gamma * b) / ((1e-3 + p) * (1.0 + a * p ** b))
    g = np.clip(coef[..., None] * dv, -4.0, 4.0)
    g *= alpha
    g[~pos] = 4.0 * alpha
    g[negs == src[:, None]] = 0.0                                       # a cell is not its own negative
    _scatter_add(y, src, g.sum(axis=1))


def umap_sgd(graph: dict, embedding: np.ndarray, a: float, b: float, n_epochs: int = 200, n_neg: int = 5,
             alpha0: float = 1.0, gamma: float = 1.0, base_seed: int = 42, method: str = "epoch") -> np.ndarray:
    """ggmlR's UMAP layout SGD over `graph` (from umap_fuzzy_graph) from `embedding` (n x dims);
    returns a new n x dims array. method="sequential" is ggmlR's edge-by-edge loop (its exact
    numbers), "epoch" the vectorised per-epoch version (module docstring)."""
    if method not in ("epoch", "sequential"):
        raise ValueError(f"method must be 'epoch' or 'sequential', got {method!r}")
    n = int(graph["n"])
    y = np.array(embedding, dtype=np.float64)
    if y.ndim != 2 or y.shape[0] != n:
        raise GGMLError(f"embedding must be {n} x dims, got shape {y.shape}")
    src, dst = np.asarray(graph["from"], dtype=np.int64), np.asarray(graph["to"], dtype=np.int64)
    w = _norm_weights(graph["weight"])
    if not (src.shape == dst.shape == w.shape):
        raise GGMLError("graph's from, to and weight must have the same length")
    if src.size and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= n):
        raise GGMLError(f"graph vertices must be 0-based indices below n = {n}")
    if int(n_epochs) < 0 or int(n_neg) < 0:
        raise GGMLError("n_epochs and n_neg must be >= 0")
    n_epochs, n_neg = int(n_epochs), int(n_neg)
    step = _sgd_epoch_sequential if method == "sequential" else _sgd_epoch_vectorised
    for epoch in range(1, n_epochs + 1):
        alpha = alpha0 * (1.0 - (epoch - 1) / n_epochs)
        fired = np.nonzero(np.floor(epoch * w) > np.floor((epoch - 1) * w))[0]
        negs = _negatives((int(base_seed) + epoch - 1) & 0xFFFFFFFF, fired, n_neg, n)
        if fired.size:
            step(y, src[fired], dst[fired], negs, a, b, alpha, gamma)
    return y


def umap_engine(mat, n_components=2, n_neighbors=15, min_dist=0.1, spread=1.0, n_epochs=200,
          gpu_neighbor_max_cells=None, backend="cpu", sgd_backend="cpu", knn_backend="cpu",
          sgd_method="epoch", seed=42, chunk_size=None, **_):
    if sgd_backend not in ("cpu", "vulkan"):
        raise ValueError(f"sgd_backend must be 'cpu' or 'vulkan', got {sgd_backend!r}")
    if knn_backend not in ("cpu", "vulkan"):
        raise ValueError(f"knn_backend must be 'cpu' or 'vulkan', got {knn_backend!r}")
    if gpu_neighbor_max_cells is not None and int(gpu_neighbor_max_cells) < 0:
        raise GGMLError("gpu_neighbor_max_cells must be NULL/None or >= 0")
    t0 = time.perf_counter()
    x = np.asarray(mat.toarray() if _issparse(mat) else mat, dtype=np.float64).T      # cells x features
    n = x.shape[0]
    if n < 3 or x.shape[1] < 1:
        raise GGMLError(f'op "umap" needs at least 3 cells and 1 feature; got a {x.shape[1]} x {n} matrix')
    n_components = int(n_components)
    if n_components < 1:
        raise GGMLError(f"n_components must be >= 1, got {n_components}")
    if int(n_neighbors) < 1:
        raise GGMLError(f"n_neighbors must be >= 1, got {n_neighbors}")
    # ggmlR only uses its GPU kNN / SGD shaders under backend "vulkan"; ggmlpy has neither
    want_gpu = backend == "vulkan" and "vulkan" in (knn_backend, sgd_backend)
    if want_gpu and sgd_backend == "vulkan":
        warnings.warn("ggmlpy: ggmlR's UMAP SGD shader (umap_sgd.comp) is not in ggml; using the CPU SGD.",
                      RuntimeWarning, stacklevel=3)
    with warnings.catch_warnings():
        if backend != "vulkan":
            warnings.simplefilter("ignore", RuntimeWarning)    # ggmlR ignores knn_backend off the GPU
        graph = umap_fuzzy_graph(x, n_neighbors, knn_backend=knn_backend if backend == "vulkan" else "cpu")
    a, b = umap_find_ab(spread=spread, min_dist=min_dist)
    t_graph = time.perf_counter()
    y0 = umap_spectral_init(graph, n_components, seed=seed)
    y = umap_sgd(graph, y0, a=a, b=b, n_epochs=n_epochs, method=sgd_method)
    t_end = time.perf_counter()
    meta = {"backend": "cpu", "backend_dist": graph["dist_backend"], "backend_sgd": "cpu", "a": a, "b": b,
            "n_neighbors": int(n_neighbors), "n_edges": int(graph["from"].size), "sgd_method": sgd_method,
            "components": [f"UMAP_{i + 1}" for i in range(n_components)]}
    return GGMLResult(y, meta, {"total": t_end - t0, "graph": t_graph - t0, "sgd": t_end - t_graph})


