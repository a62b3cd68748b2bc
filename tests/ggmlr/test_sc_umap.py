"""Port of ggmlR's tests/testthat/test-sc-umap.R (op "umap").

R's internals map to ggmlpy's public helpers: .ggmlr_umap_fuzzy_graph -> umap_fuzzy_graph,
.ggmlr_umap_sgd (its C loop) -> umap_sgd(method="sequential"), .ggmlr_umap_sgd_gpu (the Hogwild
shader) -> umap_sgd(method="epoch"), the synchronous per-epoch version that plays the shader's
part here, .ggmlr_umap_gpu -> the registry's "umap" engine. R's rnorm draws are numpy's.
The blocks on pairwise_dist.comp and its VRAM sizing test shaders of ggmlR's own ggml fork,
which ggmlpy's pinned ggml does not have: they are skipped. uwot is R-only; where a block
compares with it, umap-learn (the test extra) checks the same property.

Blocks of ggmlR's file not ported, and why:
- "test_gpu_pairwise_distance_equals_stats_dist"; "test_gpu_distance_preserves_knn_ordering_vs_stats_dist":
  ggmlR's pairwise_dist.comp is a shader of its own ggml fork; ggmlpy's distances are on the CPU.
- "test_dist_gpu_max_cells_sizes_n_from_the_vram_budget";
  "test_dist_gpu_max_cells_falls_back_when_vram_is_unknown": sizes the VRAM budget of ggmlR's fork-only
  pairwise_dist.comp shader.
"""
import math

import numpy as np
import pytest

import ggmlpy as g

sp = pytest.importorskip("scipy.sparse")

engine = g.ggml_ops_registry("umap").engine
AB = (1.577, 0.895)


def _exact_knn(x, k):
    from scipy.spatial.distance import cdist
    d = cdist(x, x)
    order = np.argsort(d, axis=1, kind="stable")[:, 1:k + 1]
    return order, np.take_along_axis(d, order, axis=1)


def test_umap_fuzzy_graph_is_well_formed_cpu_no_gpu_needed():
    x = np.random.default_rng(1).standard_normal((20, 5))
    gr = g.umap_fuzzy_graph(x, n_neighbors=5)
    assert gr["n"] == 20
    assert len(gr["from"]) == len(gr["to"])
    assert len(gr["from"]) == len(gr["weight"])
    assert np.all((gr["from"] >= 0) & (gr["from"] < gr["n"]))          # 0-based vertex indices
    assert np.all((gr["to"] >= 0) & (gr["to"] < gr["n"]))
    assert np.all((gr["weight"] > 0) & (gr["weight"] <= 1))            # t-conorm membership in (0, 1]


def test_kdtree_knn_and_distance_matrix_path_build_the_same_graph(monkeypatch):
    """R compares FNN's kd-tree with its full-distance-matrix fallback; here scipy's kd-tree
    stands in for FNN against ggmlpy's exact blocked kNN."""
    from scipy.spatial import cKDTree
    import ggmlpy.extras.sc_umap as su
    x = np.random.default_rng(5).standard_normal((120, 8))
    g_ours = g.umap_fuzzy_graph(x, n_neighbors=15)
    assert g_ours["dist_backend"] == "cpu"

    def kd_knn(xx, k, knn_backend="cpu"):
        dist, idx = cKDTree(xx).query(xx, k=k + 1)
        return {"idx": idx[:, 1:], "dist": dist[:, 1:], "backend": "kdtree"}
    monkeypatch.setattr(su, "umap_knn", kd_knn)
    g_ref = su.umap_fuzzy_graph(x, n_neighbors=15)
    assert g_ref["dist_backend"] == "kdtree"
    assert set(zip(g_ours["from"], g_ours["to"])) == set(zip(g_ref["from"], g_ref["to"]))
    np.testing.assert_allclose(g_ours["weight"], g_ref["weight"], atol=1e-6, rtol=0)   # both sorted by (from, to)


def test_knn_graph_overlaps_umap_learns_exact_nearest_neighbours():
    """R compares with uwot's exact NN; umap-learn's exact search (below 4096 points) here."""
    umap_ = pytest.importorskip("umap.umap_", reason="umap-learn (the test extra) stands in for R's uwot")
    x = np.random.default_rng(7).standard_normal((80, 6))
    k = 10
    ours = g.umap_knn(x, k)["idx"]
    theirs = umap_.nearest_neighbors(x, k + 1, "euclidean", {}, False, None)[0][:, 1:]   # column 0 is self
    overlap = np.mean([len(set(ours[i]) & set(theirs[i])) / k for i in range(len(x))])
    assert overlap > 0.95


def test_knn_distances_match_exact_euclidean_distances():
    """R checks .ggmlr_dist_matrix against stats::dist; ggmlpy's kNN distances against scipy's
    cdist (each row's k nearest, in order)."""
    x = np.random.default_rng(3).standard_normal((15, 4))
    out = g.umap_knn(x, 14)
    idx, dist = _exact_knn(x, 14)
    assert out["dist"].shape == (15, 14)
    np.testing.assert_allclose(out["dist"], dist, atol=1e-5, rtol=0)
    np.testing.assert_array_equal(out["idx"], idx)


def test_gpu_neighbor_max_cells_ceiling_still_gives_a_cpu_result():
    """R: the GPU distance path declines above the cell ceiling and the CPU answers. ggmlpy
    always answers on the CPU: a ceiling below n is accepted and the result is the same."""
    mat = np.random.default_rng(4).standard_normal((4, 30))
    capped = engine(mat, n_neighbors=5, n_epochs=5, gpu_neighbor_max_cells=10, backend="cpu")
    free = engine(mat, n_neighbors=5, n_epochs=5, backend="cpu")
    assert capped.metadata["backend_dist"] == "cpu"
    np.testing.assert_array_equal(capped.embedding, free.embedding)


def test_parallel_sgd_equals_sequential_reference_on_a_conflict_free_graph():
    """R: the Hogwild shader == the CPU loop on a perfect matching without negatives. Here the
    vectorised per-epoch SGD plays the shader; both are double, so they agree to rounding."""
    n = 20
    y0 = np.random.default_rng(1).normal(0.0, 1.0, (n, 2))
    gr = {"from": np.arange(0, n - 1, 2), "to": np.arange(1, n, 2), "weight": np.ones(n // 2), "n": n}
    yv = g.umap_sgd(gr, y0, a=AB[0], b=AB[1], n_epochs=10, n_neg=0, base_seed=42, method="epoch")
    ys = g.umap_sgd(gr, y0, a=AB[0], b=AB[1], n_epochs=10, n_neg=0, base_seed=42, method="sequential")
    assert yv.shape == (n, 2)
    assert np.max(np.abs(yv - ys)) < 1e-10
    assert np.max(np.abs(yv - y0)) > 0.1          # the layout did move


def _pcg_scalar(x):
    state = (x * 747796405 + 2891336453) & 0xFFFFFFFF
    word = (((state >> ((state >> 28) + 4)) ^ state) * 277803737) & 0xFFFFFFFF
    return (word >> 22) ^ word


def _sgd_oracle(gr, y0, a, b, n_epochs, n_neg, base_seed, alpha0=1.0, gamma=1.0):
    """The pure-R reference (.ggmlr_umap_sgd_r) written out in plain Python integers/floats.
    Squared distances are plain sums of products, as R's: numpy's dot may fuse a multiply-add
    on one CPU and not on another, and 15 epochs of SGD grow that last bit past 1e-6."""
    y = np.array(y0, dtype=float)
    n, w = gr["n"], gr["weight"] / np.max(gr["weight"])
    clamp = lambda v: np.minimum(np.maximum(v, -4), 4)   # noqa: E731
    for epoch in range(1, n_epochs + 1):
        alpha = alpha0 * (1 - (epoch - 1) / n_epochs)
        seed = (base_seed + epoch - 1) & 0xFFFFFFFF
        for e in range(len(w)):
            if not math.floor(epoch * w[e]) > math.floor((epoch - 1) * w[e]):
                continue
            i, j = gr["from"][e], gr["to"][e]
            dy = y[i] - y[j]
            d2 = float(sum(v * v for v in dy.tolist()))
            if d2 > 0:
                grad = clamp((-2 * a * b * d2 ** (b - 1)) / (1 + a * d2 ** b) * dy) * alpha
                y[i] += grad
                y[j] -= grad
            rng = seed ^ ((e * 0x9E3779B9) & 0xFFFFFFFF)
            for _ in range(n_neg):
                rng = _pcg_scalar(rng)
                c = rng % n
                if c == i:
                    continue
                dy = y[i] - y[c]
                d2 = float(sum(v * v for v in dy.tolist()))
                grad = (clamp((2 * gamma * b) / ((1e-3 + d2) * (1 + a * d2 ** b)) * dy) * alpha if d2 > 0
                        else np.array([4.0, 4.0]) * alpha)
                y[i] += grad
    return y


def test_umap_sequential_sgd_matches_the_plain_reference():
    """R: the C loop == the pure-R loop to 1e-6 on a shared-vertex graph. Here ggmlpy's
    sequential SGD (vectorised PCG draws) against the same loop in plain Python integers."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((30, 6))
    gr = g.umap_fuzzy_graph(x, n_neighbors=6)
    y0 = rng.normal(0.0, 1.0, (30, 2))
    yc = g.umap_sgd(gr, y0, a=AB[0], b=AB[1], n_epochs=15, n_neg=5, base_seed=42, method="sequential")
    yr = _sgd_oracle(gr, y0, AB[0], AB[1], 15, 5, 42)
    assert yc.shape == (30, 2)
    # testthat's tolerance = 1e-6 is all.equal's mean relative difference
    assert np.mean(np.abs(yc - yr)) / np.mean(np.abs(yr)) < 1e-6


def test_parallel_sgd_on_a_real_graph_is_finite_and_well_shaped():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((20, 5))
    gr = g.umap_fuzzy_graph(x, n_neighbors=5)
    y0 = rng.normal(0.0, 1e-4, (20, 2))
    yg = g.umap_sgd(gr, y0, a=AB[0], b=AB[1], n_epochs=10, base_seed=42, method="epoch")
    assert yg.shape == (20, 2)
    assert not np.isnan(yg).any()
    assert np.all(np.isfinite(yg))
    assert np.max(np.abs(yg)) < 1e3


def _cells(seed=1):
    mat = np.random.default_rng(seed).standard_normal((8, 30))     # 8 features x 30 cells
    return mat


def test_op_umap_end_to_end_produces_a_cells_x_2_embedding():
    """R asks backend="vulkan"; ggmlpy's run resolves the device (CPU without a Vulkan GPU)."""
    with pytest.warns(RuntimeWarning) if not g.ggml_vulkan_available() else _nullcontext():
        res = g.ggml_run(g.ggml_task("umap", _cells(), device="vulkan"), n_components=2, n_neighbors=5,
                         n_epochs=10)
    emb = res.embedding
    assert emb.shape == (30, 2)
    assert res.metadata["components"] == ["UMAP_1", "UMAP_2"]
    assert res.metadata["backend"] in ("vulkan", "cpu")
    assert res.metadata["backend_dist"] in ("fnn", "vulkan", "cpu")
    assert res.metadata["backend_sgd"] in ("vulkan", "cpu")
    both_gpu = res.metadata["backend_dist"] == "vulkan" and res.metadata["backend_sgd"] == "vulkan"
    assert res.metadata["backend"] == ("vulkan" if both_gpu else "cpu")


def _nullcontext():
    import contextlib
    return contextlib.nullcontext()


def test_op_umap_backend_cpu_keeps_both_phases_off_the_gpu():
    res = engine(_cells(), n_components=2, n_neighbors=5, n_epochs=10, backend="cpu")
    assert res.metadata["backend_dist"] in ("fnn", "cpu")
    assert res.metadata["backend_sgd"] == "cpu"
    assert res.metadata["backend"] == "cpu"


def _within_over_total(emb, lab):
    within = sum(((emb[lab == k] - emb[lab == k].mean(axis=0)) ** 2).sum() for k in np.unique(lab))
    return within / ((emb - emb.mean(axis=0)) ** 2).sum()


def _blobs():
    rng = np.random.default_rng(1)
    npt, d = 60, 20
    x = np.vstack([rng.normal(0, 1, (npt, d)), rng.normal(6, 1, (npt, d)),
                   np.hstack([rng.normal(0, 1, (npt, d - 1)), rng.normal(12, 1, (npt, 1))])])
    return x.T, np.repeat([1, 2, 3], npt)                            # features x cells


@pytest.mark.parametrize("sgd_method", ["epoch", "sequential"])
def test_op_umap_keeps_known_clusters_separated_quality_not_just_shape(sgd_method):
    mat, lab = _blobs()
    res = engine(mat, n_components=2, n_neighbors=15, n_epochs=200, backend="cpu", sgd_method=sgd_method)
    assert res.metadata["backend_sgd"] == "cpu"                     # default keeps SGD on CPU
    assert _within_over_total(res.embedding, lab) < 0.1


# -- beyond ggmlR's file: ggmlpy's own contract ----------------------------------------------------
def test_find_ab_matches_umap_learn_and_uwot_defaults():
    a, b = g.umap_find_ab(spread=1, min_dist=0.1)
    np.testing.assert_allclose((a, b), AB, atol=1e-3)               # uwot's defaults (R)
    umap_ = pytest.importorskip("umap.umap_", reason="umap-learn (the test extra) fits the same curve")
    for spread, md in [(1.0, 0.1), (1.0, 0.5), (2.0, 0.3)]:
        np.testing.assert_allclose(g.umap_find_ab(spread, md), umap_.find_ab_params(spread, md), rtol=1e-4)


def test_pcg_hash_matches_the_plain_integer_formula():
    xs = np.array([0, 1, 42, 2 ** 31, 2 ** 32 - 1, 123456789], dtype=np.uint64)
    np.testing.assert_array_equal(g.umap_pcg_hash(xs.astype(np.uint32)).astype(np.uint64),
                                  [_pcg_scalar(int(v)) for v in xs])


def test_sgd_vulkan_request_falls_back_to_the_cpu_with_a_warning(monkeypatch):
    import ggmlpy.extras.singlecell as sc
    monkeypatch.setattr(sc, "_resolve_backend", lambda want: "vulkan")   # as if a GPU were there
    with pytest.warns(RuntimeWarning, match="umap_sgd.comp"):
        res = g.ggml_run(g.ggml_task("umap", _cells(), device="vulkan"), n_neighbors=5, n_epochs=5,
                         sgd_backend="vulkan")
    assert res.metadata["backend_sgd"] == "cpu"
    assert res.metadata["backend"] == "cpu"


def test_n_components_other_than_two():
    """ggmlR's SGD (C and shader) is hard-wired to 2 columns and fails for other n_components;
    ggmlpy lays out any number of dimensions (docs/divergences.md)."""
    mat, lab = _blobs()
    res = engine(mat, n_components=3, n_neighbors=15, n_epochs=200, backend="cpu")
    assert res.embedding.shape == (180, 3)
    assert res.metadata["components"] == ["UMAP_1", "UMAP_2", "UMAP_3"]
    assert _within_over_total(res.embedding, lab) < 0.1


def test_bad_input_raises_clearly():
    with pytest.raises(g.GGMLError):
        engine(np.zeros((3, 2)), backend="cpu")                     # 2 cells
    with pytest.raises(g.GGMLError):
        engine(_cells(), n_components=0, backend="cpu")
    with pytest.raises(ValueError):
        engine(_cells(), sgd_backend="cuda", backend="cpu")
    with pytest.raises(ValueError):
        g.umap_sgd({"from": [0], "to": [1], "weight": [1.0], "n": 2}, np.zeros((2, 2)), *AB, method="x")
    with pytest.raises(g.GGMLError):
        g.umap_sgd({"from": [0], "to": [5], "weight": [1.0], "n": 2}, np.zeros((2, 2)), *AB)
