"""ggmlR's single-cell entry points (RunGGML, ggml_extract, ggml_inject) on anndata.AnnData, the
Python counterpart of its Seurat and SingleCellExperiment glue, over the same registry
(singlecell.py: embed, normalize, scale, largest_gene, neighbors, umap).

AnnData holds cells in rows (obs) and genes in columns (var); the engines take features x cells,
so extraction transposes. Results go where scanpy's own functions put theirs:
- "embed" (PCA): obsm["X_pca"], the loadings in varm["PCs"] (zeros for genes left out, as
  scanpy's mask_var), uns["pca"] with "variance", "variance_ratio" and "params";
- "umap": `obsm["X_umap"]`, `uns["umap"]["params"]` with the curve's a and b;
- "neighbors": obsp["connectivities"] (the shared-nearest-neighbour graph, Seurat's FindNeighbors
  snn, which clustering reads), obsp["distances"] (each cell's k nearest, Euclidean),
  obsp["neighbors_nn"] (the binary kNN graph, each cell in its own neighbourhood) and
  uns["neighbors"] naming them, as sc.pp.neighbors does, so sc.tl.leiden(adata) clusters on it;
- "normalize", "scale": X itself (as sc.pp.normalize_total + log1p and sc.pp.scale do), or the
  layer reduction_name names;
- "largest_gene": obs columns.
Another reduction_name writes under that name (obsm["X_<name>"], varm["<name>_PCs"],
obsp["<name>_connectivities"], ...), as scanpy's key_added does. Each run's backend and timings
go to uns["<name>_ggml"].

anndata is optional (pip install ggmlpy[anndata]); a plain features x cells matrix works without
it, as ggmlR's matrix methods do: RunGGML then returns the ggml_result.
"""
from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any, Union

import numpy as np
from numpy.typing import ArrayLike

from ..errors import GGMLError
from .singlecell import GGMLResult, _issparse, ggml_ops_registry, ggml_run, ggml_task

__all__ = ["RunGGML", "ggml_extract", "ggml_inject"]

Selection = Union[Sequence[str], ArrayLike, None]   # names, 0-based positions or a boolean mask
_COUNT_OPS = ("normalize", "largest_gene")   # ggmlR reads raw counts for these, the data layer for the rest


def _is_anndata(x) -> bool:
    try:
        import anndata
    except ImportError:
        return False
    return isinstance(x, anndata.AnnData)


def _positions(selection, names, what: str) -> np.ndarray | None:
    """0-based positions of `selection` (names, integer positions or a boolean mask) among `names`."""
    if selection is None:
        return None
    sel = np.asarray(selection)
    n = len(names)
    if sel.dtype == bool:
        if sel.shape != (n,):
            raise GGMLError(f"{what}: a boolean mask needs {n} entries, got {sel.shape}")
        return np.flatnonzero(sel)
    if sel.dtype.kind in "iu":
        bad = sel[(sel < -n) | (sel >= n)]
        if bad.size:
            raise GGMLError(f"{what}: positions {bad[:5].tolist()} are out of range for {n}")
        return np.where(sel < 0, sel + n, sel).astype(np.int64)
    index = {str(k): i for i, k in enumerate(names)}
    missing = [str(s) for s in sel.ravel() if str(s) not in index]
    if missing:
        raise GGMLError(f"{what}: {len(missing)} names are not in the data, e.g. {missing[:5]}")
    return np.array([index[str(s)] for s in sel.ravel()], dtype=np.int64)


def _source(adata, layer, use_raw):
    """(cells x genes matrix, gene names) that `layer` / `use_raw` name."""
    if use_raw:
        if adata.raw is None:
            raise GGMLError("use_raw=True, but the AnnData has no .raw")
        if layer is not None:
            raise GGMLError("give layer or use_raw, not both (.raw has no layers)")
        return adata.raw.X, adata.raw.var_names
    if layer is None:
        if adata.X is None:
            raise GGMLError("the AnnData has no X; name a layer")
        return adata.X, adata.var_names
    if layer not in adata.layers:
        raise GGMLError(f"the AnnData has no layer {layer!r}; its layers are {sorted(adata.layers)}")
    return adata.layers[layer], adata.var_names


def ggml_extract(x: Any, layer: str | None = None, genes: Selection = None, cells: Selection = None,
                 keep_sparse: bool = False, use_raw: bool = False, dtype: Any = np.float64) -> Any:
    """A features x cells matrix for the engines: from an AnnData (its X, a layer, or .raw with
    use_raw, transposed), or from a features x cells numpy / scipy.sparse matrix. `genes` and
    `cells` select features and cells (names, 0-based positions or boolean masks) before any
    densifying; a sparse matrix stays sparse with keep_sparse, else it becomes a dense `dtype`
    array (only the selected part; dtype=None keeps a float32 matrix float32, without a copy
    where it can: the transpose of AnnData's matrix is a view of it)."""
    if _is_anndata(x):
        mat, gene_names = _source(x, layer, use_raw)
        rows = _positions(cells, x.obs_names, "cells")
        cols = _positions(genes, gene_names, "genes")
        if rows is not None:
            mat = mat[rows]
        if cols is not None:
            mat = mat[:, cols]
        mat = mat.T
    elif _issparse(x) or isinstance(x, np.ndarray):
        if np.ndim(x) != 2:
            raise GGMLError(f"ggml_extract: a matrix must have 2 dims, got shape {np.shape(x)}")
        mat = x
        rows = _positions(genes, range(x.shape[0]), "genes")
        cols = _positions(cells, range(x.shape[1]), "cells")
        if rows is not None:
            mat = mat[rows]
        if cols is not None:
            mat = mat[:, cols]
    else:
        raise GGMLError(f"ggml_extract: expected an AnnData or a features x cells matrix, got {type(x).__name__}"
                        " (pip install anndata for AnnData)")
    if dtype is None:
        dtype = np.float32 if getattr(mat, "dtype", None) == np.float32 else np.float64
    if _issparse(mat):
        return mat.tocsc() if keep_sparse else np.asarray(mat.toarray(), dtype=dtype)
    if hasattr(mat, "toarray") and not isinstance(mat, np.ndarray):   # anndata's backed or array views
        mat = mat.toarray()
    return np.asarray(mat, dtype=dtype)


def _kind(result: GGMLResult) -> str:
    meta = result.metadata
    if meta.get("kind"):
        return meta["kind"]
    if "loadings" in meta:
        return "pca"
    if "a" in meta and "b" in meta:
        return "umap"
    return "reduction"


def _default_name(kind: str) -> str:
    return {"pca": "pca", "umap": "umap", "graph": "neighbors"}.get(kind, "ggml")


def _provenance(result: GGMLResult, params: dict | None = None) -> dict:
    """What uns keeps of a run: the backend, the timings and the run's scalar settings."""
    keep = {k: v for k, v in result.metadata.items()
            if isinstance(v, (bool, int, float, str, np.integer, np.floating)) and k != "kind"}
    out = {"backend": str(result.metadata.get("backend", "unknown")),
           "timings": {k: float(v) for k, v in result.timings.items()}, **keep}
    if params:
        out["params"] = {k: v for k, v in params.items() if isinstance(v, (bool, int, float, str))}
    return out


def _rows_for_cells(adata, values: np.ndarray, cells) -> np.ndarray:
    """values for the selected cells as an n_obs-row array (NaN for the cells left out)."""
    rows = _positions(cells, adata.obs_names, "cells")
    if rows is None:
        if values.shape[0] != adata.n_obs:
            raise GGMLError(f"the result has {values.shape[0]} cells, the AnnData {adata.n_obs}; pass cells=")
        return values
    full = np.full((adata.n_obs,) + values.shape[1:], np.nan)
    full[rows] = values
    return full


def _total_variance(mat) -> float:
    """Sum over features of their variance across cells (n - 1 divisor): scanpy's variance_ratio
    divides by it."""
    n = mat.shape[1]
    if _issparse(mat):
        m = np.asarray(mat.mean(axis=1)).ravel()
        sq = np.asarray(mat.multiply(mat).mean(axis=1)).ravel()
        return float(np.sum((sq - m * m) * n / max(n - 1, 1)))
    return float(np.sum(np.var(np.asarray(mat, dtype=np.float64), axis=1, ddof=1)))


def ggml_inject(x: Any, result: GGMLResult, reduction_name: str | None = None, genes: Selection = None,
                cells: Selection = None, total_variance: float | None = None, params: dict | None = None) -> Any:
    """Write a ggml_result into an AnnData where scanpy keeps the same result (see the module's
    docstring), in place; returns the AnnData. `reduction_name` (default "pca", "umap",
    "neighbors", or X for a transform) names where; `genes` / `cells`: the selection the result
    was computed on (as given to ggml_extract). A PCA's variance_ratio needs `total_variance`
    (RunGGML passes it)."""
    if not _is_anndata(x):
        raise GGMLError(f"ggml_inject: expected an AnnData, got {type(x).__name__} (pip install anndata)")
    if not isinstance(result, GGMLResult):
        raise GGMLError("ggml_inject: `result` must be a ggml_result")
    if x.is_view:
        from anndata import ImplicitModificationWarning  # optional dependency, there since x is an AnnData

        # anndata writes a view's X through to its parent, but its obsm, obsp and uns into a copy:
        # the view becomes its own AnnData first, as scanpy's functions make it
        warnings.warn("ggml_inject: received a view of an AnnData; making it a copy", ImplicitModificationWarning,
                      stacklevel=2)
        x._init_as_actual(x.copy())
    kind = _kind(result)
    name = reduction_name or _default_name(kind)
    meta = result.metadata
    if kind == "transform":
        if genes is not None or cells is not None:
            raise GGMLError("ggml_inject: a transform of selected genes or cells cannot replace the AnnData's "
                            "matrix; subset the AnnData first (adata[cells, genes].copy())")
        mat = result.embedding.T
        mat = mat.tocsr() if _issparse(mat) else np.asarray(mat)
        if mat.shape != x.shape:
            raise GGMLError(f"ggml_inject: the result is {mat.shape[0]} cells x {mat.shape[1]} genes, the "
                            f"AnnData {x.shape}")
        if reduction_name is None:
            x.X = mat
        else:
            x.layers[reduction_name] = mat
        op = (params or {}).get("op") or meta.get("layer", "transform")
        x.uns[f"{reduction_name or op}_ggml"] = _provenance(result, params)
        return x
    if kind == "coldata":
        rows = _positions(cells, x.obs_names, "cells")
        for column, values in result.embedding.items():
            values = np.asarray(values, dtype=object if column == "largest_gene" else np.float64)
            if rows is not None:
                full = np.full(x.n_obs, None if column == "largest_gene" else np.nan, dtype=values.dtype)
                full[rows] = values
                values = full
            if column == "largest_gene":
                names = x.var_names if genes is None else x.var_names[_positions(genes, x.var_names, "genes")]
                values = np.array([names[v] if isinstance(v, (int, np.integer)) else v for v in values],
                                  dtype=object)
            x.obs[column] = values
        x.uns[f"{name}_ggml"] = _provenance(result, params)
        return x
    if kind == "graph":
        if cells is not None:
            raise GGMLError("ggml_inject: a neighbour graph of selected cells cannot go into obsp (cells x cells); "
                            "subset the AnnData first")
        prefix = "" if name == "neighbors" else f"{name}_"
        x.obsp[f"{prefix}connectivities"] = meta["snn"].tocsr()
        x.obsp[f"{prefix}distances"] = meta["distances"].tocsr()
        x.obsp[f"{name}_nn"] = meta["nn"].tocsr()
        x.uns[name] = {"connectivities_key": f"{prefix}connectivities", "distances_key": f"{prefix}distances",
                       "params": {"n_neighbors": int(meta["n_neighbors"]), "method": "ggml_snn",
                                  "metric": "euclidean", "prune_snn": float(meta["prune_snn"]),
                                  **{k: v for k, v in (params or {}).items() if isinstance(v, (bool, int, float, str))}}}
        x.uns[f"{name}_ggml"] = _provenance(result, params)
        return x
    x.obsm[f"X_{name}"] = _rows_for_cells(x, np.asarray(result.embedding, dtype=np.float64), cells)
    if kind == "pca":
        loadings = np.asarray(meta["loadings"], dtype=np.float64)
        cols = _positions(genes, x.var_names, "genes")
        full = np.zeros((x.n_vars, loadings.shape[1]))
        if cols is None:
            if loadings.shape[0] != x.n_vars:
                raise GGMLError(f"ggml_inject: the loadings cover {loadings.shape[0]} genes, the AnnData has "
                                f"{x.n_vars}; pass genes=")
            full[:] = loadings
        else:
            full[cols] = loadings
        x.varm["PCs" if name == "pca" else f"{name}_PCs"] = full
        variance = np.asarray(meta["stdev"], dtype=np.float64) ** 2
        entry = {"variance": variance, "params": {"zero_center": bool(meta.get("centered", True)),
                                                  "use_highly_variable": False, "mask_var": None}}
        if total_variance:
            entry["variance_ratio"] = variance / total_variance
        x.uns[name] = entry
    elif kind == "umap":
        x.uns[name] = {"params": {"a": float(meta["a"]), "b": float(meta["b"])}}
    x.uns[f"{name}_ggml"] = _provenance(result, params)
    return x


def _reduction_matrix(adata, reduction: str, dims) -> np.ndarray:
    key = reduction if reduction in adata.obsm else f"X_{reduction}"
    if key not in adata.obsm:
        raise GGMLError(f"the AnnData has no reduction {reduction!r} in obsm (it has {sorted(adata.obsm)})")
    emb = np.asarray(adata.obsm[key], dtype=np.float64)
    if dims is not None:
        emb = emb[:, _positions(dims, range(emb.shape[1]), "dims")]
    return emb.T


def RunGGML(object: Any, op: str = "embed", layer: str | None = None, n_components: int = 50,
            reduction_name: str | None = None, device: str = "auto", genes: Selection = None,
            cells: Selection = None, reduction: str | None = None, dims: Sequence[int] | None = None,
            use_raw: bool = False, **params: Any) -> Any:
    """ggmlR's RunGGML: extract, run one registered op (ggml_ops_registry), inject.

    On an AnnData: reads X (or `layer`, or .raw with use_raw; for "normalize" and
    "largest_gene", ggmlR's counts: layers["counts"] when there is one), or with `reduction` an
    obsm embedding ("pca" or "X_pca"; `dims`: 0-based columns of it), runs `op` on `device`
    ("auto", "cpu", "vulkan") with `params` (n_components for "embed"; n_neighbors, ... for the
    others), writes the result where scanpy would (see the module's docstring) and returns the
    AnnData. "normalize" from X into X transforms X's values in place, as scanpy's
    normalize_total and log1p do (an array or sparse matrix the caller holds of X changes too;
    inplace=False writes a new matrix instead). On a features x cells matrix: returns the
    ggml_result, as ggmlR's default method."""
    entry = ggml_ops_registry(op)
    if entry is None:
        raise GGMLError(f"Unsupported op '{op}'. Supported: {', '.join(ggml_ops_registry())}.")
    run_params = ({"n_components": int(n_components)} if op == "embed" else {}) | params
    keep_sparse = entry.sparse_ok or params.get("chunk_size") is not None
    adata = _is_anndata(object)
    if adata and reduction is not None:
        if genes is not None or use_raw or layer is not None:
            raise GGMLError("RunGGML: with reduction=, the features are the reduction's; genes, layer and "
                            "use_raw do not apply")
        mat = _reduction_matrix(object, reduction, dims)
        if cells is not None:
            mat = mat[:, _positions(cells, object.obs_names, "cells")]
    else:
        if adata and layer is None and not use_raw and op in _COUNT_OPS and "counts" in object.layers:
            layer = "counts"
        mat = ggml_extract(object, layer=layer, genes=genes, cells=cells, keep_sparse=keep_sparse, use_raw=use_raw,
                           dtype=None)
        if (adata and op == "normalize" and reduction_name is None and layer is None and not use_raw and genes is None
                and cells is None and not object.is_view):
            run_params.setdefault("inplace", True)   # X into X, as scanpy's normalize_total: no second matrix
    if adata and op == "largest_gene" and reduction is None and "genes" not in run_params:
        source_genes = object.raw.var_names if use_raw else object.var_names
        sel = _positions(genes, source_genes, "genes")
        run_params["genes"] = [str(n) for n in (source_genes if sel is None else source_genes[sel])]
    result = ggml_run(ggml_task(op, mat, params=run_params, device=device))
    if not adata:
        return result
    total = (result.metadata.get("total_variance") or _total_variance(mat)) if op == "embed" else None
    return ggml_inject(object, result, reduction_name=reduction_name,
                       genes=None if reduction is not None else genes, cells=cells, total_variance=total,
                       params={"op": op, "device": device, **{k: v for k, v in run_params.items() if k != "genes"}})
