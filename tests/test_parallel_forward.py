"""ggml_pp_forward, ggml_pp_dp_forward and ggml_tp_dp_forward (ggmlR's model-parallel forwards),
on CPU backends everywhere and on the first Vulkan device where one is listed."""
import numpy as np
import pytest

import ggmlpy as g
from ggmlpy.errors import GGMLError
from ggmlpy.extras.parallel_forward import _batch_shards, _row_bands

rng = np.random.default_rng(3)
K, M = 8, 5
W1, W2 = rng.standard_normal((6, K)), rng.standard_normal((3, 6))
X = rng.standard_normal((M, K))
REF = np.maximum(X @ W1.T, 0) @ W2.T


def dense_stage(device, W, m, relu=False):
    """A stage computing relu?(W @ input) for `m` samples (input ne [W.ncol, m])."""
    def build(ctx, inp):
        w = g.ggml_new_tensor_2d(ctx, g.GGML_TYPE_F32, W.shape[1], W.shape[0])
        out = g.ggml_mul_mat(ctx, w, inp)
        return {"output": g.ggml_relu(ctx, out) if relu else out,
                "set_weights": lambda: g.ggml_backend_tensor_set_data(w, W.astype(np.float32))}
    return {"device": device, "in_shape": (W.shape[1], m), "build": build}


def two_stages(devices, m):
    return [dense_stage(devices[0], W1, m, relu=True), dense_stage(devices[-1], W2, m)]


def test_pp_forward_two_cpu_stages():
    y = g.ggml_pp_forward(two_stages(["cpu", "cpu"], M), X.ravel(), (3, M))
    assert y.shape == (3 * M,)
    np.testing.assert_allclose(y.reshape(M, 3), REF, rtol=1e-5, atol=1e-5)


def test_pp_forward_hands_off_between_shapes_of_the_same_size():
    flat = {"device": "cpu", "in_shape": (K * M,), "build": lambda ctx, inp: g.ggml_scale(ctx, inp, 2.0)}
    y = g.ggml_pp_forward([flat, dense_stage("cpu", W1, M)], X.ravel(), (6, M))
    np.testing.assert_allclose(y.reshape(M, 6), 2 * X @ W1.T, rtol=1e-5, atol=1e-5)


def test_pp_forward_returns_the_first_values_asked_for():
    y = g.ggml_pp_forward(two_stages(["cpu"], M), X.ravel(), (3, 2))
    np.testing.assert_allclose(y, REF[:2].ravel(), rtol=1e-5, atol=1e-5)


def test_pp_dp_forward_shards_the_batch_over_replicas():
    calls = []

    def make(devices, m):
        calls.append(m)
        return two_stages(devices, m)
    y = g.ggml_pp_dp_forward(make, X, [["cpu", "cpu"], ["cpu", "cpu"]], out_ncol=3)
    assert calls == [3, 2]
    np.testing.assert_allclose(y, REF, rtol=1e-5, atol=1e-5)
    y8 = g.ggml_pp_dp_forward(two_stages, X, [["cpu"]] * 8, out_ncol=3)   # more replicas than rows
    np.testing.assert_allclose(y8, REF, rtol=1e-5, atol=1e-5)


def test_tp_dp_forward_equals_x_wt():
    W = rng.standard_normal((7, K))
    for replicas, weights in (([["cpu"]], None), ([["cpu", "cpu"], ["cpu", "cpu"]], None),
                              ([["cpu", "cpu", "cpu"]], [3, 1, 0])):
        np.testing.assert_allclose(g.ggml_tp_dp_forward(W, X, replicas, weights=weights), X @ W.T,
                                   rtol=1e-5, atol=1e-5)


def test_shards_and_bands_cover_everything_once():
    assert [list(s) for s in _batch_shards(5, 2)] == [[0, 1, 2], [3, 4]]
    assert [list(s) for s in _batch_shards(2, 4)] == [[0], [1]]
    assert _row_bands(10, 3, None) == [(0, 3), (3, 6), (6, 10)]
    assert _row_bands(8, 2, [3, 1]) == [(0, 6), (6, 8)]


def test_bad_arguments_are_refused_before_ggml():
    with pytest.raises(GGMLError, match="non-empty"):
        g.ggml_pp_forward([], X.ravel(), (3, M))
    with pytest.raises(GGMLError, match="x has"):
        g.ggml_pp_forward(two_stages(["cpu"], M), X.ravel()[:-1], (3, M))
    with pytest.raises(GGMLError, match="in_shape"):
        g.ggml_pp_forward([{"device": "cpu", "in_shape": (1, 2, 3, 4, 5), "build": None}], X, (1,))
    with pytest.raises(GGMLError, match="previous stage"):
        g.ggml_pp_forward([dense_stage("cpu", W1, M), dense_stage("cpu", W1, M)], X.ravel(), (6, M))
    with pytest.raises(GGMLError, match="out_shape"):
        g.ggml_pp_forward(two_stages(["cpu"], M), X.ravel(), (4, M))
    with pytest.raises(GGMLError, match="must return a tensor"):
        g.ggml_pp_forward([{"device": "cpu", "in_shape": (K, M), "build": lambda c, i: 1}], X.ravel(), (1,))
    with pytest.raises(GGMLError, match="device"):
        g.ggml_pp_forward(two_stages([1.5], M), X.ravel(), (3, M))
    with pytest.raises(GGMLError, match="make_stages"):
        g.ggml_pp_dp_forward(None, X, [["cpu"]], 3)
    with pytest.raises(GGMLError, match="replicas"):
        g.ggml_tp_dp_forward(W1, X, [])
    with pytest.raises(GGMLError, match="K/input"):
        g.ggml_tp_dp_forward(W2, X, [["cpu"]])
    with pytest.raises(GGMLError, match="weights"):
        g.ggml_tp_dp_forward(W1, X, [["cpu", "cpu"]], weights=[1])
    with pytest.raises(GGMLError, match="host-staging"):
        g.ggml_tp_dp_forward(W1, X, [["cpu"]], transport="opaque-fd")


def test_a_stage_and_a_band_on_the_vulkan_device():
    if not g.ggml_vulkan_available():
        pytest.skip("no Vulkan device listed (GGMLPY_SOFTWARE_VULKAN=1 lists lavapipe)")
    y = g.ggml_pp_forward(two_stages([0, "cpu"], M), X.ravel(), (3, M))          # Vulkan -> CPU hand-off
    np.testing.assert_allclose(y.reshape(M, 3), REF, rtol=2e-3, atol=2e-3)
    W = rng.standard_normal((7, K))
    np.testing.assert_allclose(g.ggml_tp_dp_forward(W, X, [[0, "cpu"]]), X @ W.T, rtol=2e-3, atol=2e-3)
