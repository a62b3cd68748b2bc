"""Port of ggmlR's tests/testthat/test-sc-normalize-sparse.R: LogNormalize on a sparse matrix
keeps its sparsity and matches the dense reference, on the host and on the Vulkan device.

R's .ggmlr_normalize_sparse / .ggmlr_normalize_gpu are both the registered "normalize" engine
here (it takes the sparse path for a sparse matrix). R's rpois draws are numpy's.
"""
import numpy as np
import pytest

import ggmlpy as g

from ._backends import skip_without_vulkan

sp = pytest.importorskip("scipy.sparse")   # R: skip_if_not_installed("Matrix")

engine = g.ggml_ops_registry("normalize").engine


def lognorm_dense_ref(m, scale_factor=1e4):
    cs = m.sum(axis=0)
    cs[cs == 0] = 1
    return np.log1p(m * (scale_factor / cs))


def make_counts(n_genes=40, n_cells=25, seed=7):
    m = np.random.default_rng(seed).poisson(0.4, (n_genes, n_cells)).astype(np.float64)
    m[:, 2] = 0                       # an empty cell
    return sp.csc_matrix(m)


def test_sparse_cpu_path_matches_the_dense_reference_no_gpu_needed():
    m = make_counts()
    res = engine(m, scale_factor=1e4, backend="cpu")
    out = res.embedding
    assert sp.issparse(out)
    assert res.metadata["backend"] == "cpu"
    assert np.array_equal(out.indices, m.indices)       # the sparsity pattern is untouched
    assert np.array_equal(out.indptr, m.indptr)
    np.testing.assert_allclose(out.toarray(), lognorm_dense_ref(m.toarray()), rtol=1e-12)


def test_sparse_engine_matches_the_dense_engine_end_to_end_cpu():
    m = make_counts()
    res_sparse = engine(m, backend="cpu")
    assert res_sparse.metadata["sparse"]
    assert res_sparse.metadata["layer"] == "data"
    res_dense = engine(m.toarray(), backend="cpu")
    np.testing.assert_allclose(res_sparse.embedding.toarray(), res_dense.embedding, rtol=1e-10)


def test_an_all_zero_cell_stays_all_zero_colsum_guard():
    out = engine(make_counts(), scale_factor=1e4, backend="cpu").embedding
    assert np.all(out.toarray()[:, 2] == 0)
    assert not np.any(np.isnan(out.data))
    assert not np.any(np.isinf(out.data))


@skip_without_vulkan
def test_sparse_gpu_shader_matches_the_dense_reference():
    m = make_counts()
    res = engine(m, scale_factor=1e4, backend="vulkan")
    if res.metadata["backend"] != "vulkan":
        pytest.skip("No live Vulkan backend for sparse LogNormalize dispatch")
    out = res.embedding
    assert sp.issparse(out)
    assert np.array_equal(out.indices, m.indices)
    assert np.array_equal(out.indptr, m.indptr)
    np.testing.assert_allclose(out.toarray(), lognorm_dense_ref(m.toarray()), rtol=1e-5, atol=1e-6)  # f32 on the GPU


@skip_without_vulkan
def test_sparse_gpu_and_sparse_cpu_paths_agree():
    m = make_counts()
    gpu = engine(m, 1e4, backend="vulkan")
    if gpu.metadata["backend"] != "vulkan":
        pytest.skip("No live Vulkan backend for sparse LogNormalize dispatch")
    cpu = engine(m, 1e4, backend="cpu")
    np.testing.assert_allclose(gpu.embedding.data, cpu.embedding.data, rtol=1e-5)
