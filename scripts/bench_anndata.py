"""RunGGML on an AnnData against scanpy: normalize, PCA, neighbours and UMAP on generated counts
(default 50 000 cells x 2 000 genes), stage by stage, each stage timed on both sides in turn
(ggmlpy first in odd rounds, scanpy first in even ones), medians over the rounds.

    python scripts/bench_anndata.py [--cells 50000] [--genes 2000] [--rounds 1] [--device cpu]
                                    [--skip-umap]

scanpy runs sc.pp.normalize_total + sc.pp.log1p, sc.pp.pca (its default solver), sc.pp.neighbors
(pynndescent, approximate) and sc.tl.umap; ggmlpy runs RunGGML's "normalize", "embed",
"neighbors" (exact) and "umap". Ends with `summary: ...` (time ratios ggmlpy / scanpy per stage).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402

import anndata  # noqa: E402
import scanpy as sc  # noqa: E402

import ggmlpy as g  # noqa: E402
from benchlib import loadavg  # noqa: E402


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
        sc.pp.neighbors(a, n_neighbors=15)

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
    args = ap.parse_args()
    x = counts(args.cells, args.genes)
    print(f"{args.cells} cells x {args.genes} genes, {x.nnz / x.shape[0] / x.shape[1]:.1%} non-zero; ggmlpy "
          f"device {args.device}, {g.get_num_threads()} threads; loadavg {loadavg()}", flush=True)
    # numba compiles scanpy's kernels on first use: a warm-up on a small copy keeps that out of the timings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        warm = anndata.AnnData(x[:500].copy())
        for _, _, theirs in stages(args.device, args.skip_umap):
            theirs(warm)
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
    med = {k: statistics.median(v) for k, v in times.items()}
    parts = []
    for name, _, _ in stages(args.device, args.skip_umap):
        o, t = med.get((name, "ggmlpy")), med.get((name, "scanpy"))
        if o is None or t is None:
            why = "; ".join(f"{lbl} failed" for lbl in ("ggmlpy", "scanpy") if (name, lbl) in failed)
            parts.append(f"{name} {why}" + (f" (ggmlpy {o:.2f} s)" if o is not None else ""))
            continue
        parts.append(f"{name} {o:.2f} s vs {t:.2f} s = {o / t:.2f}x")
    print("summary: " + "; ".join(parts) + f"; loadavg {loadavg()}")


if __name__ == "__main__":
    main()
