"""Port of ggmlR's tests/testthat/test-sc-knn-gpu.R (the GPU kNN behind knn_backend="vulkan").

ggmlR's GPU kNN is knn_tiled.comp, a shader of its own ggml fork (top-k capacity 32). ggmlpy's
is the neighbors engine's Vulkan path: the distance products on ggml's mul_mat on the Vulkan
device select candidates (f16 rounding there reorders near neighbours, as ggmlR found: these
tests failed on lavapipe before), whose distances are recomputed exactly on the host (no top-k
capacity). The UMAP kNN (umap_knn) has no GPU path:
knn_backend="vulkan" falls back to the exact CPU kNN there, as ggmlR's does when its GPU declines.
The GPU blocks run where a Vulkan GPU is usable and are skipped otherwise, as in R.
"""
import numpy as np
import pytest

import ggmlpy as g
from ggmlpy.extras.linalg import _VULKAN
from ggmlpy.extras.singlecell import _knn

pytest.importorskip("scipy.sparse")      # R: skip_if_not_installed("Matrix")

has_gpu = _VULKAN.usable()


def make_x(n=300, dims=10, centres=6, seed=13):
    """A reproducible clustered feature space (cells x dims), the regime op "neighbors" runs in."""
    rng = np.random.default_rng(seed)
    mu = rng.normal(0.0, 5.0, (centres, dims))
    lab = rng.integers(0, centres, n)
    return mu[lab] + rng.standard_normal((n, dims))


def ref_knn(x, k):
    """Brute-force exact kNN (0-based, self excluded, nearest first)."""
    from scipy.spatial.distance import cdist
    return np.argsort(cdist(x, x), axis=1, kind="stable")[:, 1:k + 1]


def gpu_knn(x, k):
    idx, dist = _knn(np.asarray(x, dtype=np.float64), k, "vulkan")
    return {"idx": idx, "dist": dist, "backend": "vulkan"}


def test_umap_gpu_knn_declines_without_the_shader():
    """R: .ggmlr_knn_gpu returns NULL without a GPU. ggmlpy never has knn_tiled.comp: a
    "vulkan" request for the UMAP kNN declines (with a warning) and the CPU answers."""
    x = make_x(50, 5)
    with pytest.warns(RuntimeWarning, match="knn_tiled.comp"):
        out = g.umap_knn(x, 10, knn_backend="vulkan")
    assert out["backend"] == "cpu"


def test_umap_knn_falls_back_to_cpu_when_gpu_declines():
    x = make_x(120, 8)
    with pytest.warns(RuntimeWarning):
        out = g.umap_knn(x, n_neighbors=15, knn_backend="vulkan")
    assert out["backend"] in ("fnn", "cpu", "vulkan")
    assert out["idx"].shape == (x.shape[0], 15)
    np.testing.assert_array_equal(out["idx"], ref_knn(x, 15))


@pytest.mark.skipif(not has_gpu, reason="no Vulkan GPU")
def test_gpu_knn_matches_the_exact_reference_neighbour_sets():
    from scipy.spatial.distance import cdist
    x = make_x(300, 10)
    k = 20
    gk = gpu_knn(x, k)
    assert gk["backend"] == "vulkan"
    assert gk["idx"].shape == (x.shape[0], k)
    assert gk["dist"].shape == (x.shape[0], k)
    ref = ref_knn(x, k)
    assert all(set(gk["idx"][i]) == set(ref[i]) for i in range(x.shape[0]))   # order may differ on ties
    assert np.all(np.diff(gk["dist"], axis=1) >= 0)                         # ascending per row
    dtrue = cdist(x, x)
    err = max(np.max(np.abs(gk["dist"][i] - dtrue[i, gk["idx"][i]])) for i in range(x.shape[0]))
    assert err < 1e-3                                                       # f32 products vs f64


@pytest.mark.skipif(not has_gpu, reason="no Vulkan GPU")
def test_gpu_knn_handles_k_below_and_at_the_pipeline_capacity():
    x = make_x(200, 6)
    for k in (5, 32):
        gk = gpu_knn(x, k)
        ref = ref_knn(x, k)
        assert all(set(gk["idx"][i]) == set(ref[i]) for i in range(x.shape[0]))


@pytest.mark.skipif(not has_gpu, reason="no Vulkan GPU")
def test_k_above_the_pipeline_capacity_32():
    """R: k = 33 exceeds knn_tiled.comp's capacity and declines to the CPU. ggmlpy's Vulkan kNN
    has no top-k capacity (the top-k is on the host): k = 33 is answered, exactly."""
    x = make_x(100, 6)
    gk = gpu_knn(x, 33)
    ref = ref_knn(x, 33)
    assert all(set(gk["idx"][i]) == set(ref[i]) for i in range(x.shape[0]))


@pytest.mark.skipif(not has_gpu, reason="no Vulkan GPU")
def test_op_neighbors_runs_end_to_end_with_knn_backend_vulkan():
    mat = make_x(250, 10).T                                                  # features x cells
    res = g.ggml_ops_registry("neighbors").engine(mat, n_neighbors=20, backend="vulkan", knn_backend="vulkan")
    assert res.metadata["kind"] == "graph"
    assert res.metadata["nn"] is not None
    assert res.metadata["snn"] is not None
