"""ggmlR's single-cell compute contract: ggml_task (what to compute), ggml_ops_registry (what can
be computed, and what it needs), ggml_run (dispatch) and ggml_result (what comes back).

It works on plain matrices, features (genes) in rows and cells in columns: a numpy array, or a
scipy.sparse matrix where an operation accepts one (`sparse_ok`). Seurat and
SingleCellExperiment glue (ggmlR's RunGGML, ggml_extract, ggml_inject) is R-only.

Registered operations, as ggmlR's engines compute them:
- "embed": PCA. The features x features covariance and the projection of the cells are matrix
  products (ggml's mul_mat on the Vulkan device under backend "vulkan"; on the host under
  "cpu", BLAS in the data's precision: float32 for float32 counts, summed in float64 over blocks
  of 4 096 cells); the leading eigenpairs are LAPACK's (scipy's subset solver; ggml has no
  eigensolver). A sparse matrix is densified one block of cells at a time, never whole, and
  multiplied as it is for the projection. With `chunk_size`, the cells are streamed in blocks
  of that many; more than 20 000 cells stream in blocks of 20 000.
- "normalize": LogNormalize, log1p(x / colSums(x) * scale_factor), on the Vulkan device under
  backend "vulkan" (f32); a sparse matrix keeps its sparsity (log1p(0) = 0), only its stored
  values are transformed. float32 counts give float32 values (as scanpy's), others float64.
  With inplace=True a float matrix is transformed where it is (RunGGML does so from X into X).
- "scale": ScaleData, (x - rowMeans) / rowSds (n - 1 divisor, a zero sd counts as 1), clipped
  above at max_value. Memory-bound, so it stays on the host unless scale_backend="vulkan".
- "largest_gene": per cell, the feature with the largest value (the first on ties) and its
  share of the cell's total, in percent.
- "neighbors": Seurat's FindNeighbors graphs from the cells' exact k nearest neighbours
  (Euclidean; the distance products on the Vulkan device with knn_backend="vulkan" under
  backend "vulkan", else float32 BLAS on the host, pruned by coarse clusters, blocks of cells on
  the threads; either way the candidates' distances are recomputed in float64, so the kNN is
  exact): the binary kNN graph with each cell in its own neighbourhood, and the
  shared-nearest-neighbour graph of Jaccard overlaps, pruned below prune_snn (scipy.sparse
  matrices). The selection and the SNN graph are C kernels (ggmlpy/kernels/singlecell.c;
  numpy and scipy's sparse product where it cannot be built).
- "umap": UMAP (ggmlpy/extras/sc_umap.py): exact kNN, ggmlR's fuzzy simplicial set, spectral start and
  its SGD layout, on the CPU (ggmlR's Vulkan shaders for it are its own fork's).
"""
from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..core.ops import ggml_add, ggml_clamp, ggml_log, ggml_mul, ggml_sub
from ..errors import GGMLError
from .linalg import _VULKAN
from . import sc_kernels
from .sc_base import GGMLResult, _issparse, _knn, _one_blas_thread, _product
from .sc_umap import umap_engine

__all__ = ["ggml_task", "ggml_result", "ggml_ops_registry", "ggml_run", "GGMLTask", "GGMLResult", "OpEntry"]

_DEVICES = ("auto", "vulkan", "cpu")
AUTO_CHUNK_CELLS = 20000  # ggmlR streams larger inputs in blocks of this many cells


# -- contracts ------------------------------------------------------------------------------------
@dataclass
class GGMLTask:
    """ggmlR's ggml_task: the operation, the features x cells matrix, its parameters and the
    requested device ("auto", "vulkan" or "cpu"). It computes nothing."""
    op: str
    matrix: object
    params: dict = field(default_factory=dict)
    device: str = "auto"

    def __getitem__(self, key):          # R's task$op reads as task["op"] too
        return getattr(self, key)

    def __repr__(self):
        r, c = self.matrix.shape
        return f"<ggml_task> op={self.op}  matrix={r} features x {c} cells  device={self.device}"


def ggml_task(op: str, matrix: "np.ndarray | object", params: dict | None = None, device: str = "auto") -> GGMLTask:
    """A task for ggml_run: `op` (a name in ggml_ops_registry()), a features x cells matrix
    (numeric numpy array, or scipy.sparse), `params` for the operation, `device`."""
    if not isinstance(op, str):
        raise GGMLError("`op` must be a single operation name (a str).")
    if device not in _DEVICES:
        raise ValueError(f"device must be one of {', '.join(map(repr, _DEVICES))}, got {device!r}")
    if _issparse(matrix):
        if matrix.ndim != 2:
            raise GGMLError("`matrix` must be a dense matrix or a sparse matrix (2 dims).")
    else:
        if not isinstance(matrix, np.ndarray) or matrix.ndim != 2 or matrix.dtype.kind not in "biuf":
            raise GGMLError("`matrix` must be a dense matrix (a 2-D numeric numpy array) or a scipy.sparse matrix.")
    return GGMLTask(op, matrix, dict(params or {}), device)


def ggml_result(embedding: "np.ndarray | dict | object", metadata: dict | None = None, timings: dict | None = None) -> GGMLResult:
    """A result as the engines return it (ggmlR's constructor, for engines of one's own)."""
    return GGMLResult(embedding, dict(metadata or {}), dict(timings or {}))


# -- registry -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class OpEntry:
    """One registered operation: its engine, required parameter names, description, and whether
    the engine takes a sparse matrix as it is (otherwise ggml_run densifies it first)."""
    op: str
    engine: Callable
    params: tuple = ()
    desc: str = ""
    sparse_ok: bool = False

    def __getitem__(self, key):
        return getattr(self, key)


_REGISTRY: dict[str, OpEntry] = {}


def _register(op, engine, params=(), desc="", sparse_ok=False):
    _REGISTRY[op] = OpEntry(op, engine, tuple(params), desc, sparse_ok)


def ggml_ops_registry(op: str | None = None) -> dict | OpEntry | None:
    """The registered operations, {name: OpEntry} sorted by name; with `op`, that entry (None if
    unknown), so a caller can check support and required parameters before building a task."""
    if op is not None:
        return _REGISTRY.get(op)
    return {k: _REGISTRY[k] for k in sorted(_REGISTRY)}


# -- dispatch -------------------------------------------------------------------------------------
def _resolve_backend(want: str) -> str:
    """"cpu" stays; "auto" is "vulkan" when a Vulkan device is listed and is a real GPU (not
    lavapipe); "vulkan" without one falls back to "cpu" with a warning, never an error
    (ggmlR's promise)."""
    if want not in _DEVICES:
        raise ValueError(f"backend must be one of {', '.join(map(repr, _DEVICES))}, got {want!r}")
    if want == "cpu":
        return "cpu"
    gpu = _VULKAN.usable()
    if want == "auto":
        return "vulkan" if gpu and not _VULKAN.software() else "cpu"
    if gpu:
        return "vulkan"
    warnings.warn("ggmlpy: Vulkan GPU not available; falling back to CPU.", RuntimeWarning, stacklevel=3)
    return "cpu"


def ggml_run(task: GGMLTask, backend: str | None = None, **params) -> GGMLResult:
    """Run a task: check its op against the registry and its required parameters (keyword
    arguments here override task.params), resolve the device (`backend` overrides task.device),
    densify a sparse matrix unless the op takes it as it is, and call the engine."""
    if not isinstance(task, GGMLTask):
        raise GGMLError("`task` must be a ggml_task (see ggml_task()).")
    entry = ggml_ops_registry(task.op)
    if entry is None:
        raise GGMLError(f"Unsupported op '{task.op}'. Supported: {', '.join(ggml_ops_registry())}.")
    merged = {**task.params, **params}
    missing = [p for p in entry.params if p not in merged]
    if missing:
        raise GGMLError(f"Op '{task.op}' requires parameter(s): {', '.join(missing)}.")
    used = _resolve_backend(backend if backend is not None else task.device)
    mat = task.matrix
    chunked = merged.get("chunk_size") is not None and _issparse(mat)
    if _issparse(mat) and not entry.sparse_ok and not chunked:
        mat = mat.toarray()
    return entry.engine(mat, backend=used, **merged)


# -- engines --------------------------------------------------------------------------------------
def _column_blocks(ncol: int, chunk_size) -> list:
    if chunk_size is None or not np.isfinite(chunk_size) or chunk_size >= ncol:
        return [slice(0, ncol)]
    step = max(1, int(chunk_size))
    return [slice(s, min(s + step, ncol)) for s in range(0, ncol, step)]


def _dense_block(mat, cols: slice, dtype=np.float64) -> np.ndarray:
    blk = mat[:, cols]
    blk = blk.toarray() if _issparse(blk) else np.asarray(blk)
    return blk.astype(dtype, copy=False)


_GRAM_CELLS = 4096   # cells per product of the covariance: float32 sums over at most this many


def _feature_sums(mat) -> np.ndarray:
    """Each feature's sum over the cells, in float64."""
    if _issparse(mat):
        csc = mat.tocsc()           # AnnData's transposed CSR is one already: no copy
        # bincount casts float32 weights ten times slower than astype does
        return np.bincount(csc.indices, weights=csc.data.astype(np.float64), minlength=mat.shape[0])
    return np.asarray(mat).sum(axis=1, dtype=np.float64)


def _add_gram(cov, blk):
    """cov (float64, upper triangle) += blk @ blk.T, by BLAS's symmetric rank-k update in blk's
    precision (half the multiply-adds of a product, no transposed copy)."""
    try:
        from scipy.linalg import blas  # optional (scipy); numpy's product otherwise
    except ImportError:
        cov += blk @ blk.T
        return
    syrk = blas.ssyrk if blk.dtype == np.float32 else blas.dsyrk
    # blk (features, cells) is C-ordered when it comes from AnnData: its transpose is Fortran-ordered
    cov += syrk(1.0, blk.T, trans=1) if blk.flags.c_contiguous else syrk(1.0, blk, trans=0)


def _top_eigenpairs(cov, k, dtype):
    """The k largest eigenvalues of the symmetric cov and their eigenvectors, largest first:
    LAPACK's subset solver (only k eigenvectors are formed) in `dtype`, numpy's full eigh
    without scipy."""
    n = cov.shape[0]
    sym = ((cov + cov.T) / 2).astype(dtype, copy=False)   # symmetrise the GPU's rounding
    with _one_blas_thread():
        try:
            from scipy.linalg import eigh  # optional (scipy)
        except ImportError:
            vals, vecs = np.linalg.eigh(sym)
        else:
            vals, vecs = eigh(sym, subset_by_index=[n - k, n - 1], driver="evx")
    order = np.argsort(vals)[::-1][:k]
    return np.maximum(vals[order].astype(np.float64), 0.0), vecs[:, order].astype(np.float64)


def _pca(mat, n_components=50, center=True, backend="cpu", chunk_size=None, **_):
    """PCA by the features x features covariance: its products in the data's precision (float32
    counts stay float32: the covariance's rounding is then ~1e-6 of its eigenvalues, measured
    at 50 000 x 2 000), summed in float64 over blocks of cells; a sparse matrix is densified one
    block at a time, the projection multiplies it as it is."""
    n_feat, n_cell = mat.shape
    if n_feat < 1 or n_cell < 1:
        raise GGMLError(f"op 'embed' needs at least one feature and one cell, got {n_feat} x {n_cell}")
    k = int(min(int(n_components), n_feat, n_cell))
    if k < 1:
        raise GGMLError(f"n_components must be >= 1, got {n_components}")
    auto = chunk_size is None and n_cell > AUTO_CHUNK_CELLS
    blocks = _column_blocks(n_cell, AUTO_CHUNK_CELLS if auto else chunk_size)
    dtype = _float_dtype(mat)
    t0 = time.perf_counter()
    mu = _feature_sums(mat) / n_cell if center else np.zeros(n_feat)
    t_ctr = time.perf_counter()
    cov = np.zeros((n_feat, n_feat))
    mu_t = mu.astype(dtype)[:, None]
    for outer in blocks:
        for cols in _column_blocks(outer.stop - outer.start, _GRAM_CELLS):
            cols = slice(outer.start + cols.start, outer.start + cols.stop)
            blk = _dense_block(mat, cols, dtype)
            blk = blk - mu_t if center else blk
            if backend == "vulkan":
                cov += _product(backend, blk, blk)
            else:
                _add_gram(cov, blk)
    if backend != "vulkan":
        cov = np.triu(cov) + np.triu(cov, 1).T
    cov /= max(n_cell - 1, 1)
    t_mm = time.perf_counter()
    vals, loadings = _top_eigenpairs(cov, k, dtype)
    t_eig = time.perf_counter()
    if backend == "vulkan":
        scores = np.empty((n_cell, k))
        for cols in blocks:
            blk = _dense_block(mat, cols) - mu[:, None]
            scores[cols] = _product(backend, blk.T, loadings.T)
    else:
        # (X - mu)^T V = X^T V - mu^T V: a sparse matrix multiplies as it is
        scores = np.asarray(mat.T @ loadings.astype(dtype), dtype=np.float64) - (mu @ loadings)[None, :]
    t_end = time.perf_counter()
    meta = {"stdev": np.sqrt(vals), "loadings": loadings, "backend": backend, "centered": bool(center)}
    if center:
        meta["total_variance"] = float(np.trace(cov))   # the sum of every feature's variance
    if len(blocks) > 1 or chunk_size is not None:
        meta["chunked"] = True
    return GGMLResult(scores, meta, {"total": t_end - t0, "centre": t_ctr - t0, "matmul_cov": t_mm - t_ctr,
                                     "eigen": t_eig - t_mm, "matmul_proj": t_end - t_eig})


def _log1p_of_product_on_vulkan(x, f):
    """log1p(x * f) in f32 on the Vulkan device (f broadcast over x's rows), as log(x * f + 1)."""
    return _VULKAN.run(lambda ctx, t: ggml_log(ctx, ggml_add(ctx, ggml_mul(ctx, t[0], t[1]), t[2])),
                       [x, f, np.ones((1, 1))])


def _float_dtype(x) -> np.dtype:
    """float32 stays float32 (scanpy's counts are float32, and log1p of a count needs no more);
    anything else is computed in float64."""
    return np.dtype(np.float32) if x.dtype == np.float32 else np.dtype(np.float64)


def _lognorm_factor(col_sums, scale_factor, dtype) -> np.ndarray:
    """scale_factor / each cell's total, in `dtype`; an empty cell's factor is 1 (it stays zero)."""
    sums = np.asarray(col_sums, dtype=np.float64).ravel()
    sums[sums == 0] = 1.0
    return (float(scale_factor) / sums).astype(dtype)


def _normalize(mat, scale_factor=1e4, backend="cpu", chunk_size=None, inplace=False, **_):
    """LogNormalize. With `inplace`, a float matrix's values are transformed where they are (the
    result shares the input's arrays, as scanpy's normalize_total and log1p do): no new matrix,
    whose first touch of fresh memory costs more than the arithmetic. Without it, or where it
    cannot be (integer counts, duplicates to sum, the Vulkan device), the result is a new matrix
    and the input stays as it is; metadata["inplace"] says which."""
    t0 = time.perf_counter()
    dtype = _float_dtype(mat)
    inplace = bool(inplace) and mat.dtype == dtype and backend != "vulkan"
    if _issparse(mat):
        out = _normalize_sparse(mat, scale_factor, backend, dtype, inplace)
        meta = {"kind": "transform", "layer": "data", "backend": "vulkan" if backend == "vulkan" else "cpu",
                "scale_factor": scale_factor, "sparse": True, "inplace": out.data is mat.data}
        return GGMLResult(out, meta, {"total": time.perf_counter() - t0})
    x = np.asarray(mat)
    inplace = inplace and x.flags.writeable
    if backend == "vulkan" and x.size:
        # numpy (features, cells) is ggml ne [cells, features]: the per-cell factor is one row,
        # broadcast over the features
        out = _log1p_of_product_on_vulkan(x, _lognorm_factor(x.sum(axis=0), scale_factor, dtype)[None, :])
        out = out.astype(dtype, copy=False)
    else:
        backend = "cpu"
        out = x if inplace else np.empty_like(x, dtype=dtype)   # the input's layout (AnnData's: cells contiguous)
        # cells in blocks that stay in cache between the sum, the product and the log
        step = max(1, (1 << 18) // max(x.shape[0], 1)) if x.flags.f_contiguous else x.shape[1]
        for lo in range(0, x.shape[1], step):
            blk, dst = x[:, lo:lo + step], out[:, lo:lo + step]
            np.multiply(blk, _lognorm_factor(blk.sum(axis=0), scale_factor, dtype)[None, :], out=dst)
            np.log1p(dst, out=dst)
    meta = {"kind": "transform", "layer": "data", "backend": backend, "scale_factor": scale_factor,
            "inplace": out is x}
    return GGMLResult(out, meta, {"total": time.perf_counter() - t0})


def _normalize_sparse(mat, scale_factor, backend, dtype, inplace):
    """LogNormalize of a sparse features x cells matrix: only the stored values change (log1p(0)
    = 0), the pattern is kept, the values transformed in one pass in their own precision."""
    csc = mat.tocsc()                           # AnnData's transposed CSR is one already: no copy
    if inplace and csc.data is mat.data and sc_kernels.lognormalize_in_place(
            csc.data, csc.indices, csc.indptr, scale_factor):
        csc.has_canonical_format = True         # the kernel checked it
        return csc
    if not csc.has_canonical_format:            # duplicates sum before the log; the input stays as it is
        csc = csc.copy()
        csc.sum_duplicates()
    inplace = inplace and csc.data is mat.data  # without the kernels: numpy, in place
    per_cell = np.diff(csc.indptr)
    col_sums = np.zeros(csc.shape[1])
    filled = per_cell > 0
    if csc.nnz:
        # in the values' own type: numpy sums each segment pairwise (error ~log2(n) ulp), and a
        # float64 accumulator would cost a cast of every value (30x the time)
        col_sums[filled] = np.add.reduceat(csc.data, csc.indptr[:-1][filled])
    per_value = np.repeat(_lognorm_factor(col_sums, scale_factor, dtype), per_cell)
    if backend == "vulkan" and csc.nnz:
        data = _log1p_of_product_on_vulkan(csc.data[None, :], per_value[None, :]).ravel().astype(dtype)
    else:
        data = np.multiply(per_value, csc.data, out=csc.data if inplace else per_value)
        np.log1p(data, out=data)
    if inplace:
        return csc
    out = type(csc)((data, csc.indices.copy(), csc.indptr.copy()), shape=csc.shape)
    out.has_canonical_format = True             # the input's pattern, made canonical above
    return out


def _scale(mat, max_value=10.0, backend="cpu", scale_backend="cpu", chunk_size=None, **_):
    if scale_backend not in ("cpu", "vulkan"):
        raise ValueError(f"scale_backend must be 'cpu' or 'vulkan', got {scale_backend!r}")
    backend = "vulkan" if backend == "vulkan" and scale_backend == "vulkan" else "cpu"
    t0 = time.perf_counter()
    n_feat, n_cell = mat.shape
    if chunk_size is None and _issparse(mat) and n_cell > AUTO_CHUNK_CELLS:
        chunk_size = AUTO_CHUNK_CELLS
    if chunk_size is not None and _issparse(mat):
        blocks = _column_blocks(n_cell, chunk_size)
        s1, s2 = np.zeros(n_feat), np.zeros(n_feat)
        for cols in blocks:
            blk = _dense_block(mat, cols)
            s1 += blk.sum(axis=1)
            s2 += (blk * blk).sum(axis=1)
        mu = s1 / n_cell
        sd = np.sqrt(np.maximum((s2 - n_cell * mu * mu) / max(n_cell - 1, 1), 0.0))
        sd[sd == 0] = 1.0
        out = np.empty((n_feat, n_cell))
        for cols in blocks:
            out[:, cols] = np.minimum((_dense_block(mat, cols) - mu[:, None]) / sd[:, None], max_value)
        meta = {"kind": "transform", "layer": "scale.data", "backend": "cpu", "max_value": max_value,
                "chunked": True}
        return GGMLResult(out, meta, {"total": time.perf_counter() - t0})
    x = mat.toarray() if _issparse(mat) else np.asarray(mat, dtype=np.float64)
    mu = x.mean(axis=1) if n_cell else np.zeros(n_feat)
    xc = x - mu[:, None]
    sd = np.sqrt((xc * xc).sum(axis=1) / max(n_cell - 1, 1))
    sd[sd == 0] = 1.0
    if backend == "vulkan" and x.size:
        # numpy (features, cells) is ne [cells, features]: the per-feature mean and 1/sd are one
        # column each (numpy (features, 1)), broadcast over the cells.
        out = _VULKAN.run(lambda ctx, t: ggml_clamp(ctx, ggml_mul(ctx, ggml_sub(ctx, t[0], t[1]), t[2]),
                                                    -np.inf, float(max_value)),
                          [x, mu[:, None], (1.0 / sd)[:, None]])
    else:
        out = np.minimum(xc / sd[:, None], max_value)
    meta = {"kind": "transform", "layer": "scale.data", "backend": backend, "max_value": max_value}
    return GGMLResult(out, meta, {"total": time.perf_counter() - t0})


def _largest_gene(mat, backend="cpu", genes=None, chunk_size=None, **_):
    t0 = time.perf_counter()
    n_feat, n_cell = mat.shape
    if genes is not None and len(genes) != n_feat:
        raise GGMLError(f"genes has {len(genes)} names for {n_feat} features")
    if _issparse(mat):
        csc = mat.tocsc()
        idx, best, total = np.full(n_cell, -1), np.zeros(n_cell), np.zeros(n_cell)
        for j in range(n_cell):
            lo, hi = csc.indptr[j], csc.indptr[j + 1]
            if hi > lo:
                seg = csc.data[lo:hi]
                total[j] = seg.sum()
                rows = csc.indices[lo:hi]
                best[j] = seg.max()
                idx[j] = rows[seg == best[j]].min()   # the first feature holding the maximum
    else:
        x = np.asarray(mat, dtype=np.float64)
        total = x.sum(axis=0)
        idx = x.argmax(axis=0) if n_feat else np.zeros(n_cell, dtype=int)
        best = x[idx, np.arange(n_cell)] if n_feat else np.zeros(n_cell)
        idx = np.where(total == 0, -1, idx)
    names = [None if i < 0 else (genes[i] if genes is not None else int(i)) for i in idx]
    denom = np.where(total == 0, 1.0, total)
    pct = np.where(idx < 0, 0.0, best / denom * 100)
    return GGMLResult({"largest_gene": names, "percent.Largest.Gene": pct},
                      {"kind": "coldata", "backend": "cpu"}, {"total": time.perf_counter() - t0})


def _neighbors(mat, n_neighbors=20, prune_snn=1 / 15, backend="cpu", knn_backend="cpu", chunk_size=None, **_):
    if knn_backend not in ("cpu", "vulkan"):
        raise ValueError(f"knn_backend must be 'cpu' or 'vulkan', got {knn_backend!r}")
    try:
        import scipy.sparse as sp  # optional dependency (scipy), loaded on first use
    except ImportError as e:
        raise GGMLError('op "neighbors" builds sparse graphs with scipy: pip install scipy') from e
    used = "vulkan" if backend == "vulkan" and knn_backend == "vulkan" else "cpu"
    t0 = time.perf_counter()
    x = np.asarray(mat.toarray() if _issparse(mat) else mat, dtype=np.float64).T       # cells x features
    n = x.shape[0]
    if n < 2 or x.shape[1] < 1:
        raise GGMLError(f'op "neighbors" needs at least 2 cells and 1 feature; got a {n} x {x.shape[1]} matrix '
                        "(build neighbours from a feature space such as PCA)")
    k = int(min(int(n_neighbors), n - 1))
    if k < 1:
        raise GGMLError(f"n_neighbors must be >= 1, got {n_neighbors}")
    idx, dist = _knn(x, k, used)
    t_knn = time.perf_counter()
    # each cell's k nearest others and their Euclidean distances (scanpy's obsp["distances"]), columns ascending
    by_col = np.argsort(idx, axis=1)
    distances = sp.csr_matrix((np.take_along_axis(dist, by_col, axis=1).ravel(),
                               np.take_along_axis(idx, by_col, axis=1).ravel(), np.arange(0, n * k + 1, k)), shape=(n, n))
    # binary kNN graph with the point itself (Seurat counts it: |N(i)| = k + 1)
    members = np.sort(np.concatenate([np.arange(n)[:, None], idx], axis=1), axis=1)
    knn = sp.csr_matrix((np.ones(members.size), members.ravel(), np.arange(0, members.size + 1, k + 1)), shape=(n, n))
    # SNN: Jaccard |N(i) & N(j)| / |N(i) | N(j)|, those below prune_snn left out
    if sc_kernels.available():
        snn = sp.csr_matrix(sc_kernels.snn_graph(idx, prune_snn), shape=(n, n))
    else:                                       # the overlaps as a sparse product, then the Jaccard of its values
        overlap = (knn @ knn.T).tocsr()
        snn = overlap.astype(np.float64)
        snn.data = overlap.data / (2.0 * (k + 1) - overlap.data)
        snn.data[snn.data < prune_snn] = 0.0
        snn.eliminate_zeros()
        snn.sort_indices()
    t_end = time.perf_counter()
    meta = {"kind": "graph", "backend": used, "nn": knn, "snn": snn, "distances": distances, "n_neighbors": k,
            "prune_snn": prune_snn, "n_snn_edges": int(snn.nnz)}
    return GGMLResult(snn, meta, {"total": t_end - t0, "knn": t_knn - t0, "snn": t_end - t_knn})


_register("embed", _pca, params=("n_components",),
          desc="PCA dimensionality reduction (covariance multiply on GPU, eigen on CPU)", sparse_ok=True)
_register("normalize", _normalize, desc="LogNormalize: per-cell library-size scaling + log1p (elementwise on GPU)",
          sparse_ok=True)
_register("scale", _scale, desc="ScaleData z-score per gene + clamp (elementwise on GPU)", sparse_ok=True)
_register("largest_gene", _largest_gene,
          desc="Highest-expressed gene per cell + its percent of the cell total (CPU, sparse)", sparse_ok=True)
_register("neighbors", _neighbors,
          desc="kNN + shared-NN (SNN/Jaccard) graphs, Seurat FindNeighbors-compatible (exact kNN)")
_register("umap", umap_engine, desc="UMAP embedding (exact kNN, fuzzy simplicial set, ggmlR's SGD layout; CPU)")
