"""Port of ggmlR's tests/testthat/test-sc-chunked.R: the streamed (chunked) "scale" and "embed"
engines equal the unstreamed ones at any block size.

R's internal .ggmlr_chunk_cols is ggmlpy.extras.singlecell._column_blocks (0-based slices); the engines
are the registry's. R's sample/rpois draws are numpy's; R's dimnames are R-only.
"""
import numpy as np
import pytest

import ggmlpy as g
from ggmlpy import singlecell

sp = pytest.importorskip("scipy.sparse")   # R: skip_if_not_installed("Matrix")


def mk_sparse(n_feat=30, n_cell=47, density=0.3, seed=42):
    rng = np.random.default_rng(seed)
    d = np.zeros(n_feat * n_cell)
    nz = rng.choice(n_feat * n_cell, int(density * n_feat * n_cell), replace=False)
    d[nz] = rng.poisson(5, nz.size) + 1
    return sp.csc_matrix(d.reshape(n_cell, n_feat).T)


SP = mk_sparse()
DN = SP.toarray()


def test_chunk_cols_slices_cover_every_column_exactly_once():
    for cs in (1, 7, 47, 100, None):
        blocks = singlecell._column_blocks(SP.shape[1], cs)
        covered = np.concatenate([np.arange(SP.shape[1])[b] for b in blocks])
        assert np.array_equal(np.sort(covered), np.arange(SP.shape[1]))
    assert len(singlecell._column_blocks(47, None)) == 1
    assert len(singlecell._column_blocks(47, 100)) == 1
    assert len(singlecell._column_blocks(20, 5)) == 4


def test_chunked_scale_equals_non_chunked_scale_cpu():
    scale = g.ggml_ops_registry("scale").engine
    full = scale(DN, backend="cpu")
    for cs in (1, 10, 13, 50):                       # 13 does not divide 47; 50 > 47
        chk = scale(SP, backend="cpu", chunk_size=cs)
        np.testing.assert_allclose(chk.embedding, full.embedding, rtol=1e-10, atol=1e-12, err_msg=f"chunk_size={cs}")
        assert chk.metadata["chunked"]


def test_chunked_pca_equals_non_chunked_pca_cpu_up_to_sign():
    pca = g.ggml_ops_registry("embed").engine
    k = 5
    full = pca(DN, n_components=k, backend="cpu")
    for cs in (1, 11, 13, 60):
        chk = pca(SP, n_components=k, backend="cpu", chunk_size=cs)
        assert chk.metadata["chunked"]
        cors = [abs(np.corrcoef(chk.embedding[:, i], full.embedding[:, i])[0, 1]) for i in range(k)]
        assert min(cors) > 1 - 1e-6
        np.testing.assert_allclose(chk.metadata["stdev"], full.metadata["stdev"], rtol=1e-8, err_msg=f"chunk_size={cs}")


def test_normalize_accepts_chunk_size_as_a_no_op():
    normalize = g.ggml_ops_registry("normalize").engine
    a = normalize(SP, backend="cpu")
    b = normalize(SP, backend="cpu", chunk_size=10)
    np.testing.assert_allclose(a.embedding.toarray(), b.embedding.toarray(), rtol=1e-12)
