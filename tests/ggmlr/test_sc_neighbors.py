"""Port of ggmlR's tests/testthat/test-sc-neighbors.R (op "neighbors": kNN + SNN graphs).

R's internal .ggmlr_neighbors_gpu is the registry entry's engine; R's Matrix graphs are
scipy.sparse matrices; R's rnorm draws are numpy's; cell names (dimnames) are R-only. The two
blocks that compare with Seurat::FindNeighbors or run FindClusters are R-only (Seurat).

Blocks of ggmlR's file not ported, and why:
- "test_snn_graph_matches_seurat_findneighbors_exact_knn": R-only: compares with Seurat::FindNeighbors (Seurat
  integration).
- "test_runggml_neighbors_writes_graphs_accepted_by_findclusters": R-only: RunGGML writes Seurat @graphs for
  FindClusters (Seurat integration).
"""
import numpy as np
import pytest

import ggmlpy as g

sp = pytest.importorskip("scipy.sparse")   # R: skip_if_not_installed("Matrix")

engine = g.ggml_ops_registry("neighbors").engine


def test_neighbors_engine_returns_well_formed_knn_snn_graphs():
    mat = np.random.default_rng(1).standard_normal((10, 60))      # 10 features x 60 cells
    res = engine(mat, n_neighbors=15, backend="cpu")
    assert res.metadata["kind"] == "graph"
    nn, snn = res.metadata["nn"], res.metadata["snn"]
    assert nn.shape == (60, 60)
    assert snn.shape == (60, 60)
    assert np.all(nn.data == 1)
    np.testing.assert_array_equal(np.asarray(nn.sum(axis=1)).ravel(), np.full(60, 16))   # k + self
    assert np.all((snn.data > 0) & (snn.data <= 1 + 1e-9))
    np.testing.assert_array_equal(snn.diagonal(), np.ones(60))
    assert res.embedding is snn


def test_snn_pruning_drops_weak_edges():
    mat = np.random.default_rng(2).standard_normal((8, 50))
    loose = engine(mat, n_neighbors=15, prune_snn=0, backend="cpu")
    tight = engine(mat, n_neighbors=15, prune_snn=0.5, backend="cpu")
    assert tight.metadata["n_snn_edges"] <= loose.metadata["n_snn_edges"]
    assert np.all(tight.metadata["snn"].data >= 0.5)


