"""ggmlpy.extras.singlecell beyond ggmlR's own tests: argument checks, overrides, edge cases."""
import numpy as np
import pytest

import ggmlpy as g
from ggmlpy.errors import GGMLError


def test_result_constructor_and_item_access():
    r = g.ggml_result(np.zeros((3, 2)), {"backend": "cpu"}, {"total": 0.5})
    assert r["embedding"].shape == (3, 2) and r.metadata["backend"] == "cpu" and r.timings == {"total": 0.5}
    assert repr(r) == "<ggml_result> embedding=3 x 2  backend=cpu"


def test_registry_is_sorted_and_entries_are_complete():
    reg = g.ggml_ops_registry()
    assert list(reg) == sorted(reg) == ["embed", "largest_gene", "neighbors", "normalize", "scale", "umap"]
    assert all(callable(e.engine) and e.desc for e in reg.values())


def test_run_keywords_override_task_params_and_backend_overrides_device():
    X = np.random.default_rng(0).standard_normal((6, 30))
    task = g.ggml_task("embed", X, params={"n_components": 2}, device="vulkan")
    res = g.ggml_run(task, backend="cpu", n_components=3)
    assert res.embedding.shape == (30, 3) and res.metadata["backend"] == "cpu"
    assert set(res.timings) == {"total", "centre", "matmul_cov", "eigen", "matmul_proj"}


def test_n_components_is_capped_by_the_matrix():
    res = g.ggml_run(g.ggml_task("embed", np.eye(4)[:, :3], {"n_components": 50}, "cpu"))
    assert res.embedding.shape == (3, 3)


def test_bad_arguments():
    X = np.ones((4, 5))
    with pytest.raises(ValueError, match="device"):
        g.ggml_task("embed", X, device="gpu")
    with pytest.raises(GGMLError, match="dense matrix"):
        g.ggml_task("embed", np.ones((2, 2, 2)))
    with pytest.raises(GGMLError, match="n_components"):
        g.ggml_run(g.ggml_task("embed", X, {"n_components": 0}, "cpu"))
    with pytest.raises(GGMLError, match="at least one"):
        g.ggml_run(g.ggml_task("embed", np.ones((4, 0)), {"n_components": 1}, "cpu"))
    with pytest.raises(GGMLError, match="genes"):
        g.ggml_run(g.ggml_task("largest_gene", X, device="cpu"), genes=["a"])
    with pytest.raises(ValueError, match="scale_backend"):
        g.ggml_run(g.ggml_task("scale", X, device="cpu"), scale_backend="gpu")
    with pytest.raises(ValueError, match="backend"):
        g.ggml_run(g.ggml_task("scale", X), backend="cuda")


def test_largest_gene_without_names_gives_0_based_indices():
    m = np.array([[0.0, 1, 5], [0, 3, 5]])
    res = g.ggml_run(g.ggml_task("largest_gene", m, device="cpu")).embedding
    assert res["largest_gene"] == [None, 1, 0]
    np.testing.assert_allclose(res["percent.Largest.Gene"], [0, 75, 50])


def test_scale_clamps_only_above_and_keeps_constant_genes_at_zero():
    X = np.vstack([np.full(5, 3.0), [0, 0, 0, 0, 100.0]])
    out = g.ggml_run(g.ggml_task("scale", X, device="cpu"), max_value=1.0).embedding
    assert np.all(out[0] == 0)
    assert out[1].max() == 1.0 and out[1].min() == pytest.approx(-0.4472135955)


@pytest.fixture(params=["kernels", "numpy"])
def sc_paths(request, monkeypatch):
    """Each single-cell engine twice: with ggmlpy/kernels/singlecell.c, and with numpy and scipy alone."""
    from ggmlpy.extras import sc_kernels
    if request.param == "numpy":
        monkeypatch.setattr(sc_kernels, "_library", lambda: None)
    elif not sc_kernels.available():
        pytest.skip("no C compiler for ggmlpy/kernels/singlecell.c")
    return request.param


def test_neighbors_match_a_brute_force_search_and_seurat_jaccard(sc_paths):
    from scipy.spatial.distance import cdist
    mat = np.random.default_rng(4).standard_normal((5, 40))
    res = g.ggml_run(g.ggml_task("neighbors", mat, device="cpu"), n_neighbors=6, prune_snn=0.0)
    D = cdist(mat.T, mat.T)
    np.fill_diagonal(D, np.inf)
    hoods = [set(np.argsort(D[i], kind="stable")[:6]) | {i} for i in range(40)]
    want = np.array([[len(a & b) / len(a | b) for b in hoods] for a in hoods])
    np.testing.assert_allclose(res.embedding.toarray(), want, rtol=1e-12)
    assert res.metadata["n_neighbors"] == 6 and res.metadata["backend"] == "cpu"
    with pytest.raises(GGMLError, match="at least 2 cells"):
        g.ggml_run(g.ggml_task("neighbors", np.ones((3, 1)), device="cpu"))
    with pytest.raises(ValueError, match="knn_backend"):
        g.ggml_run(g.ggml_task("neighbors", mat, device="cpu"), knn_backend="annoy")
    capped = g.ggml_run(g.ggml_task("neighbors", mat[:, :4], device="cpu"), n_neighbors=50)
    assert capped.metadata["n_neighbors"] == 3 and capped.embedding.toarray().min() == 1.0   # everyone is everyone's


def test_neighbors_distances_on_the_vulkan_device():
    if not g.ggml_vulkan_available():
        pytest.skip("no Vulkan device listed (GGMLPY_SOFTWARE_VULKAN=1 lists lavapipe)")
    mat = np.random.default_rng(5).standard_normal((6, 30)) * 10
    gpu = g.ggml_run(g.ggml_task("neighbors", mat, device="vulkan"), knn_backend="vulkan", n_neighbors=5)
    cpu = g.ggml_run(g.ggml_task("neighbors", mat, device="cpu"), n_neighbors=5)
    assert gpu.metadata["backend"] == "vulkan"
    assert (gpu.metadata["nn"] != cpu.metadata["nn"]).nnz <= 4          # f32 distances may swap a near tie


def test_auto_skips_a_software_vulkan_device_but_vulkan_takes_it(monkeypatch):
    from ggmlpy import singlecell
    monkeypatch.setattr(singlecell._VULKAN, "usable", lambda: True)
    monkeypatch.setattr(singlecell._VULKAN, "software", lambda: True)
    assert singlecell._resolve_backend("auto") == "cpu"
    assert singlecell._resolve_backend("vulkan") == "vulkan"


def test_normalize_keeps_float32_and_the_layout_and_sums_duplicates_first():
    sp = pytest.importorskip("scipy.sparse")
    rng = np.random.default_rng(3)
    counts = rng.poisson(1.0, (300, 40)).astype(np.float32)       # cells x genes, as AnnData holds them
    counts[7] = 0                                                  # an empty cell
    ref = np.log1p(counts.astype(np.float64) / np.maximum(counts.sum(1, keepdims=True), 1) * 1e4)
    engine = g.ggml_ops_registry("normalize").engine
    dense = engine(counts.T, backend="cpu").embedding              # a features x cells view, cells contiguous
    assert dense.dtype == np.float32 and dense.T.flags.c_contiguous
    np.testing.assert_allclose(dense.T, ref, rtol=3e-7)
    csr = sp.csr_matrix(counts)
    out = engine(csr.T, backend="cpu").embedding
    assert out.dtype == np.float32 and out.has_canonical_format
    np.testing.assert_allclose(out.T.toarray(), ref, rtol=3e-7)
    assert not np.shares_memory(out.indices, csr.indices)          # the result owns its pattern
    # a stored value split in two is one count of 2, not log1p(1) twice; the input is left as it is
    dup = sp.csc_matrix((np.array([1.0, 1.0, 2.0]), np.array([0, 0, 1]), np.array([0, 2, 3])), shape=(2, 2))
    before = dup.data.copy()
    got = engine(dup, backend="cpu").embedding.toarray()
    np.testing.assert_allclose(got, [[np.log1p(1e4), 0.0], [0.0, np.log1p(1e4)]])
    np.testing.assert_array_equal(dup.data, before)
    assert engine(counts.T.astype(np.float64), backend="cpu").embedding.dtype == np.float64


def test_normalize_in_place_transforms_the_values_where_they_are(sc_paths):
    sp = pytest.importorskip("scipy.sparse")
    rng = np.random.default_rng(4)
    counts = rng.poisson(0.7, (500, 60)).astype(np.float32)        # cells x genes
    counts[11] = 0                                                  # an empty cell
    ref = np.log1p(counts.astype(np.float64) / np.maximum(counts.sum(1, keepdims=True), 1) * 1e4)
    engine = g.ggml_ops_registry("normalize").engine
    for index in (np.int32, np.int64):
        csr = sp.csr_matrix(counts)
        csr.indices, csr.indptr = csr.indices.astype(index), csr.indptr.astype(index)
        data = csr.data
        res = engine(csr.T, backend="cpu", inplace=True)
        assert res.metadata["inplace"] and np.shares_memory(res.embedding.data, data)
        np.testing.assert_allclose(csr.toarray(), ref, rtol=3e-7)   # the input itself holds the result
        np.testing.assert_allclose(res.embedding.T.toarray(), ref, rtol=3e-7)
    dense = counts.copy()
    res = engine(dense.T, backend="cpu", inplace=True)
    assert res.metadata["inplace"] and np.shares_memory(res.embedding, dense)
    np.testing.assert_allclose(dense, ref, rtol=3e-7)
    # where it cannot be in place, a new matrix and the input as it was: duplicates, integer counts
    dup = sp.csc_matrix((np.array([1.0, 1.0, 2.0]), np.array([0, 0, 1]), np.array([0, 2, 3])), shape=(2, 2))
    before = dup.data.copy()
    res = engine(dup, backend="cpu", inplace=True)
    assert not res.metadata["inplace"]
    np.testing.assert_allclose(res.embedding.toarray(), [[np.log1p(1e4), 0.0], [0.0, np.log1p(1e4)]])
    np.testing.assert_array_equal(dup.data, before)
    ints = sp.csr_matrix(counts.astype(np.int64))
    res = engine(ints.T, backend="cpu", inplace=True)
    assert not res.metadata["inplace"] and res.embedding.dtype == np.float64
    np.testing.assert_allclose(res.embedding.T.toarray(), ref, rtol=1e-12)
    assert ints.data.dtype == np.int64 and ints.data.max() == counts.max()


def test_pca_takes_float32_sparse_counts_as_they_are_and_matches_float64():
    sp = pytest.importorskip("scipy.sparse")
    rng = np.random.default_rng(5)
    types = rng.gamma(0.6, 2.0, (4, 60)) * (rng.random((4, 60)) < 0.3)
    counts = np.log1p(rng.poisson(types[rng.integers(0, 4, 900)] + 0.05)).astype(np.float32)   # cells x genes
    entry = g.ggml_ops_registry("embed")
    assert entry.sparse_ok                                          # never densified whole
    ref = entry.engine(counts.T.astype(np.float64), n_components=6, backend="cpu")
    for chunk in (None, 200):
        got = entry.engine(sp.csr_matrix(counts).T, n_components=6, backend="cpu", chunk_size=chunk)
        np.testing.assert_allclose(got.metadata["stdev"], ref.metadata["stdev"], rtol=1e-5)
        for i in range(6):
            assert abs(np.corrcoef(got.embedding[:, i], ref.embedding[:, i])[0, 1]) > 1 - 1e-5
    np.testing.assert_allclose(ref.metadata["total_variance"], counts.astype(np.float64).var(axis=0, ddof=1).sum(),
                               rtol=1e-10)


def test_the_pruned_knn_is_exact_across_clusters_and_ties(sc_paths):
    """From 4 096 cells the host kNN compares a cluster's cells only with the clusters that can
    hold a neighbour; the answer is still the exact one, ties by index."""
    from scipy.spatial.distance import cdist

    from ggmlpy.extras.sc_base import _coarse_clusters, _knn
    rng = np.random.default_rng(11)
    x = rng.normal(0, 4, (12, 6))[rng.integers(0, 12, 6500)] + rng.standard_normal((6500, 6))
    x[1:4] = x[0]                                       # exact ties
    x[100:104] = x[100] + 1e-9 * np.array([0, 1, 3, 7])[:, None]   # near ties, below float32 resolution
    assert np.unique(_coarse_clusters(x - x.mean(0), 15)[0]).size > 2
    idx, dist = _knn(x, 15, "cpu")
    for lo in range(0, 6500, 1300):
        d = cdist(x[lo:lo + 1300], x)
        d[np.arange(d.shape[0]), np.arange(lo, lo + d.shape[0])] = np.inf
        ref = np.argsort(d, axis=1, kind="stable")[:, :15]
        np.testing.assert_array_equal(idx[lo:lo + 1300], ref)
        np.testing.assert_allclose(dist[lo:lo + 1300], np.take_along_axis(d, ref, 1), rtol=1e-12, atol=1e-12)


def test_knn_refuses_non_finite_features():
    x = np.random.default_rng(0).standard_normal((50, 3))
    x[7, 1] = np.nan
    with pytest.raises(GGMLError, match="NaN or infinite"):
        g.ggml_run(g.ggml_task("neighbors", x.T, device="cpu"), n_neighbors=5)


def test_the_kernels_give_the_graphs_numpy_and_scipy_give(monkeypatch):
    pytest.importorskip("scipy.sparse")
    from ggmlpy.extras import sc_kernels
    if not sc_kernels.available():
        pytest.skip("no C compiler for ggmlpy/kernels/singlecell.c")
    rng = np.random.default_rng(8)
    x = rng.normal(0, 3, (6, 10))[rng.integers(0, 6, 5000)] + rng.standard_normal((5000, 10))   # cells x features
    fast = g.ggml_run(g.ggml_task("neighbors", x.T, device="cpu"), n_neighbors=12).metadata
    monkeypatch.setattr(sc_kernels, "_library", lambda: None)
    slow = g.ggml_run(g.ggml_task("neighbors", x.T, device="cpu"), n_neighbors=12).metadata
    for key in ("snn", "nn", "distances"):
        a, b = fast[key], slow[key]
        assert a.has_sorted_indices and b.has_sorted_indices
        np.testing.assert_array_equal(a.indptr, b.indptr)
        np.testing.assert_array_equal(a.indices, b.indices)
        np.testing.assert_allclose(a.data, b.data, rtol=1e-12)
    assert fast["n_snn_edges"] == slow["n_snn_edges"] > 5000
