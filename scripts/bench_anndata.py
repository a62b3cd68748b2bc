"""RunGGML on an AnnData against scanpy: normalize, PCA, neighbours and UMAP on generated counts
(default 50 000 cells x 2 000 genes), stage by stage, each stage timed on both sides in turn
(ggmlpy first in odd rounds, scanpy first in even ones), medians over the rounds.

    python scripts/bench_anndata.py [--cells 50000] [--genes 2000] [--rounds 1] [--device cpu]
                                    [--skip-umap] [--dense]

The counts are a CSR matrix, as scanpy's users hold them (--dense: a dense float32 array).
scanpy runs sc.pp.normalize_total + sc.pp.log1p, sc.pp.pca (its default solver: ARPACK with
implicit centring on sparse input), sc.pp.neighbors (pynndescent, approximate, with the settings
scanpy picks for this many cells) and sc.tl.umap; ggmlpy runs RunGGML's "normalize", "embed",
"neighbors" (exact) and "umap". The warm-up runs every stage of both sides on 600 cells first,
so that numba's compilation of scanpy's and pynndescent's kernels is not timed. After the
timings: the PCA variances' largest relative difference, and both sides' kNN recall against
exact neighbours on a sample of cells. Ends with `summary: normalize 0.8x, pca 0.9x, ...`
(time ratios ggmlpy / scanpy per stage, medians over the rounds).

scanpy 1.11.5 reads `getnnz` of the kNN matrix that pynndescent 0.7 returns as a scipy
`csr_array`, which scipy 1.17 no longer has it on: scanpy's default path fails from 4 096 cells
on. The benchmark gives scanpy the same PyNNDescentTransformer (the n_trees and n_iters scanpy
computes) with its result handed over as a `csr_matrix`, which scanpy reads as it always did.
"""
from __future__ import annotations

import argparse
import statistics
import time
import warnings

import numpy as np
import scipy.sparse as sp

import anndata
import scanpy as sc

import ggmlpy as g
from benchlib import loadavg


def counts(n_cells: int, n_genes: int, n_types: int = 8, seed: int = 0) -> sp.csr_matrix:
    """Poisson counts of a few cell types with sparse expression profiles, built in blocks."""
    rng = np.random.default_rng(seed)
    means = rng.gamma(0.6, 2.0, size=(n_types, n_genes)) * (rng.random((n_types, n_genes)) < 0.2) + 0.02
    blocks = []
    for start in range(0, n_cells, 5000):
        n = min(5000, n_cells - start)
        kind = rng.integers(0, n_types, n)
        blocks.append(sp.csr_matrix(rng.poisson(means[kind] * rng.uniform(0.5, 1.5, (n, 1))).astype(np.float32)))
    return sp.vstack(blocks).tocsr()


def nonzero_share(x) -> float:
    return (x.nnz if sp.issparse(x) else np.count_nonzero(x)) / (x.shape[0] * x.shape[1])


def scanpy_knn(n_obs: int, n_neighbors: int = 15):
    """The PyNNDescentTransformer sc.pp.neighbors builds for n_obs cells, returning a csr_matrix
    (see the module's docstring)."""
    from pynndescent import PyNNDescentTransformer

    class CsrMatrixOut(PyNNDescentTransformer):
        def fit_transform(self, X, y=None, **kw):
            return sp.csr_matrix(super().fit_transform(X, y, **kw))

        def transform(self, X, **kw):
            return sp.csr_matrix(super().transform(X, **kw))

    return CsrMatrixOut(n_neighbors=n_neighbors, metric="euclidean", n_jobs=sc.settings.n_jobs,
                        n_trees=min(64, 5 + round(n_obs ** 0.5 / 20.0)), n_iters=max(5, round(np.log2(n_obs))))


def stages(device: str, skip_umap: bool):
    def ours_norm(a):
        g.RunGGML(a, "normalize", device=device)

    def ours_pca(a):
        g.RunGGML(a, "embed", n_components=50, device=device)

    def ours_nn(a):
        g.RunGGML(a, "neighbors", reduction="pca", n_neighbors=15, device=device)

    def ours_umap(a):
        g.RunGGML(a, "umap", reduction="pca", device=device)

    def sc_norm(a):
        sc.pp.normalize_total(a, target_sum=1e4)
        sc.pp.log1p(a)

    def sc_pca(a):
        sc.pp.pca(a, n_comps=50)

    def sc_nn(a):
        sc.pp.neighbors(a, n_neighbors=15, transformer=scanpy_knn(a.n_obs))

    def sc_umap(a):
        sc.tl.umap(a)

    out = [("normalize", ours_norm, sc_norm), ("pca", ours_pca, sc_pca), ("neighbors", ours_nn, sc_nn)]
    return out if skip_umap else out + [("umap", ours_umap, sc_umap)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cells", type=int, default=50_000)
    ap.add_argument("--genes", type=int, default=2_000)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--device", default="cpu", choices=["cpu", "vulkan", "auto"])
    ap.add_argument("--skip-umap", action="store_true")
    ap.add_argument("--dense", action="store_true", help="dense float32 counts instead of CSR")
    args = ap.parse_args()
    x = counts(args.cells, args.genes)
    if args.dense:
        x = x.toarray()
    print(f"{args.cells} cells x {args.genes} genes, {nonzero_share(x):.1%} non-zero"
          f" ({'dense' if args.dense else 'CSR'}); ggmlpy "
          f"device {args.device}, {g.get_num_threads()} threads; loadavg {loadavg()}", flush=True)
    # numba compiles scanpy's kernels on first use: a warm-up on a small copy keeps that out of the timings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        warm = anndata.AnnData(x[:600].copy())
        warm_ours = anndata.AnnData(x[:600].copy())
        for _, ours, theirs in stages(args.device, args.skip_umap):
            theirs(warm)
            ours(warm_ours)
    times: dict = {}
    failed: dict = {}   # (stage, side) -> why: that side skips the stage and the ones after it
    names = [name for name, _, _ in stages(args.device, args.skip_umap)]
    for r in range(args.rounds):
        ours, theirs = anndata.AnnData(x.copy()), anndata.AnnData(x.copy())
        for name, run_ours, run_theirs in stages(args.device, args.skip_umap):
            order = [("ggmlpy", run_ours, ours), ("scanpy", run_theirs, theirs)]
            for label, fn, a in (order if r % 2 == 0 else order[::-1]):
                if (name, label) in failed:
                    continue
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    t0 = time.perf_counter()
                    try:
                        fn(a)
                    except Exception as e:   # one side's own failure: the stages after it need its result
                        why = f"{type(e).__name__}: {e}"
                        failed.update({(later, label): why for later in names[names.index(name):]})
                        print(f"  round {r + 1} {name:9s} {label:6s} failed: {failed[(name, label)]}", flush=True)
                        continue
                    dt = time.perf_counter() - t0
                times.setdefault((name, label), []).append(dt)
                print(f"  round {r + 1} {name:9s} {label:6s} {dt:8.2f} s  (loadavg {loadavg()})", flush=True)
    checks(ours, theirs)
    med = {k: statistics.median(v) for k, v in times.items()}
    parts, short = [], []
    for name, _, _ in stages(args.device, args.skip_umap):
        o, t = med.get((name, "ggmlpy")), med.get((name, "scanpy"))
        if o is None or t is None:
            why = "; ".join(f"{lbl} failed" for lbl in ("ggmlpy", "scanpy") if (name, lbl) in failed)
            parts.append(f"{name} {why}" + (f" (ggmlpy {o:.2f} s)" if o is not None else ""))
            short.append(f"{name} {why}")
            continue
        parts.append(f"{name} {o:.2f} s vs {t:.2f} s = {o / t:.2f}x")
        short.append(f"{name} {o / t:.2f}x")
    print("times: " + "; ".join(parts) + f"; loadavg {loadavg()}")
    print("summary: " + ", ".join(short) + f" scanpy ({args.cells} x {args.genes}"
          f"{', dense' if args.dense else ''}); loadavg {loadavg()}")


def checks(ours, theirs, sample: int = 1000) -> None:
    """The accuracy beside the speed: PCA variances against scanpy's, and each side's kNN recall
    against exact neighbours (brute force) of `sample` cells in ggmlpy's PCA space."""
    if "pca" in ours.uns and "pca" in theirs.uns:
        va, vb = ours.uns["pca"]["variance"], theirs.uns["pca"]["variance"]
        print(f"check: PCA variances, largest relative difference to scanpy's {np.max(np.abs(va / vb - 1)):.2e}")
    emb = np.asarray(ours.obsm.get("X_pca"))
    rng = np.random.default_rng(1)
    cells = rng.choice(ours.n_obs, min(sample, ours.n_obs), replace=False)
    for label, a, rep in (("ggmlpy", ours, emb), ("scanpy", theirs, np.asarray(theirs.obsm.get("X_pca", emb)))):
        if "distances" not in a.obsp:
            continue
        d2 = (rep[cells] ** 2).sum(1)[:, None] + (rep ** 2).sum(1)[None, :] - 2.0 * rep[cells] @ rep.T
        d2[np.arange(cells.size), cells] = np.inf
        dist = a.obsp["distances"].tocsr()
        exact = np.argpartition(d2, 14, axis=1)[:, :15]          # the 15 nearest others
        hits = []
        for j, i in enumerate(cells):                             # a side's 15 nearest others, by its distances
            cols, vals = dist.indices[dist.indptr[i]:dist.indptr[i + 1]], dist.data[dist.indptr[i]:dist.indptr[i + 1]]
            got = [c for c in cols[np.argsort(vals, kind="stable")] if c != i][:15]
            hits.append(len(set(got) & set(exact[j])) / 15)
        recall, k = float(np.mean(hits)), 15
        print(f"check: {label} kNN recall against exact neighbours ({k} per cell, {cells.size} cells) {recall:.4f}")


if __name__ == "__main__":
    main()
