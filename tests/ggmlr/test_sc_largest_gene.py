"""Port of ggmlR's tests/testthat/test-sc-largest-gene.R (op "largest_gene").

R's internal engine .ggmlr_largest_gene is the registry entry's engine here. Gene names come from
the `genes` parameter (R reads rownames); R's cell row.names are R-only. R's rpois draws are numpy's.
"""
import numpy as np
import pytest

import ggmlpy as g

sp = pytest.importorskip("scipy.sparse")   # R: skip_if_not_installed("Matrix")

engine = g.ggml_ops_registry("largest_gene").engine


def make_counts(n_genes=30, n_cells=20, seed=11):
    m = np.random.default_rng(seed).poisson(0.5, (n_genes, n_cells)).astype(np.float64)
    m[:, 3] = 0                      # an empty cell (all-zero column)
    m[0:2, 4] = 8
    m[2:, 4] = 0                     # a tie between rows 1 and 2 in cell 5
    return m, [f"Gene{i + 1}" for i in range(n_genes)]


def largest_gene_ref(m, genes):
    """Seurat's percent.Largest.Gene in plain numpy (max.col ties = "first")."""
    cs = m.sum(axis=0)
    idx = m.argmax(axis=0)
    mx = m[idx, np.arange(m.shape[1])]
    empty = cs == 0
    gene = [None if e else genes[i] for i, e in zip(idx, empty)]
    return gene, mx / np.where(empty, 1.0, cs) * 100


def test_sparse_cpu_path_matches_the_plain_r_reference():
    m, genes = make_counts()
    ref_gene, ref_pct = largest_gene_ref(m, genes)
    res = engine(sp.csc_matrix(m), backend="cpu", genes=genes)
    assert res.metadata["kind"] == "coldata"
    assert res.metadata["backend"] == "cpu"
    assert res.embedding["largest_gene"] == ref_gene
    np.testing.assert_allclose(res.embedding["percent.Largest.Gene"], ref_pct, rtol=1.5e-8)


def test_dense_and_sparse_paths_are_bit_identical():
    m, genes = make_counts()
    rd = engine(m, backend="cpu", genes=genes).embedding
    rs = engine(sp.csc_matrix(m), backend="cpu", genes=genes).embedding
    assert rd["largest_gene"] == rs["largest_gene"]
    assert np.array_equal(rd["percent.Largest.Gene"], rs["percent.Largest.Gene"])


def test_empty_cell_yields_na_gene_and_0_percent():
    m, genes = make_counts()
    res = engine(sp.csc_matrix(m), backend="cpu", genes=genes).embedding
    assert res["largest_gene"][3] is None
    assert res["percent.Largest.Gene"][3] == 0


def test_ties_resolve_to_the_first_row_matches_max_col_first():
    m, genes = make_counts()
    res = engine(sp.csc_matrix(m), backend="cpu", genes=genes).embedding
    assert res["largest_gene"][4] == "Gene1"


def test_op_is_registered_as_sparse_ok_and_dispatch_keeps_the_matrix_sparse():
    entry = g.ggml_ops_registry("largest_gene")
    assert entry is not None
    assert entry.sparse_ok
    m, _ = make_counts()
    res = g.ggml_run(g.ggml_task("largest_gene", sp.csc_matrix(m), device="cpu"))
    assert res.metadata["kind"] == "coldata"
    assert set(res.embedding) == {"largest_gene", "percent.Largest.Gene"}   # R: a data.frame
