"""ggmlpy.extras.linalg: ggmlR's matrix drop-ins. The dispatch (which products go to the GPU) is tested
with a recording stand-in for the Vulkan multiply, so it runs on any machine; the real Vulkan
path runs where a Vulkan device is listed (GGMLPY_SOFTWARE_VULKAN=1 on lavapipe)."""
import numpy as np
import pytest

import ggmlpy as g
from ggmlpy import linalg
from ggmlpy.errors import GGMLError

rng = np.random.default_rng(0)


@pytest.fixture
def fake_gpu(monkeypatch):
    """A Vulkan device that exists and multiplies in float32, recording each call's shapes."""
    calls = []

    def abt(x, y, prec):
        calls.append((x.shape, y.shape, prec))
        return (x.astype(np.float32) @ y.astype(np.float32).T).astype(np.float64)
    monkeypatch.setattr(linalg._VULKAN, "usable", lambda: True)
    monkeypatch.setattr(linalg._VULKAN, "software", lambda: False)
    monkeypatch.setattr(linalg._VULKAN, "abt", abt)
    return calls


def test_each_product_reaches_the_gpu_in_one_x_at_y_t_form(fake_gpu):
    A, B = rng.standard_normal((5, 3)), rng.standard_normal((3, 4))
    np.testing.assert_allclose(g.ggml_matmul(A, B, device="gpu"), A @ B, rtol=1e-5)
    np.testing.assert_allclose(g.ggml_crossprod(A, device="gpu"), A.T @ A, rtol=1e-5)
    np.testing.assert_allclose(g.ggml_tcrossprod(A, device="gpu", prec="f16"), A @ A.T, rtol=1e-5)
    assert fake_gpu == [((5, 3), (4, 3), "f32"), ((3, 5), (3, 5), "f32"), ((5, 3), (5, 3), "f16")]


def test_auto_sends_only_products_from_2e7_multiply_adds_to_the_gpu(fake_gpu):
    small = np.ones((10, 10))
    g.ggml_matmul(small, small)                                   # 1e3: host
    assert fake_gpu == []
    big_a, big_b = np.ones((200, 500)), np.ones((500, 200))       # exactly 2e7: GPU
    np.testing.assert_array_equal(g.ggml_matmul(big_a, big_b), np.full((200, 200), 500.0))
    assert len(fake_gpu) == 1
    g.ggml_matmul(big_a, big_b, device="cpu")                     # "cpu" never
    assert len(fake_gpu) == 1


def test_a_failing_gpu_falls_back_to_the_exact_host_product(monkeypatch):
    def broken(x, y, prec):
        raise GGMLError("out of device memory")
    monkeypatch.setattr(linalg._VULKAN, "usable", lambda: True)
    monkeypatch.setattr(linalg._VULKAN, "abt", broken)
    A, B = rng.standard_normal((4, 6)), rng.standard_normal((6, 2))
    np.testing.assert_array_equal(g.ggml_matmul(A, B, device="gpu"), A @ B)


def test_without_vulkan_gpu_falls_back_silently(monkeypatch):
    monkeypatch.setattr(linalg._VULKAN, "usable", lambda: False)
    A = rng.standard_normal((3, 3))
    np.testing.assert_array_equal(g.ggml_tcrossprod(A, device="gpu"), A @ A.T)


def test_matmul_f64_never_goes_through_f32(fake_gpu):
    A, B = rng.standard_normal((300, 300)), rng.standard_normal((300, 300))
    for device in ("auto", "gpu", "cpu"):
        np.testing.assert_array_equal(g.ggml_matmul_f64(A, B, device=device), A @ B)
    assert fake_gpu == []


def test_inputs_are_checked():
    A = np.ones((2, 3))
    with pytest.raises(ValueError, match="device"):
        g.ggml_matmul(A, A.T, device="tpu")
    with pytest.raises(ValueError, match="prec"):
        g.ggml_matmul(A, A.T, prec="f8")
    with pytest.raises(ValueError, match="device"):
        g.ggml_matmul_f64(A, A.T, device="vulkan")
    with pytest.raises(GGMLError, match="matrix"):
        g.ggml_matmul(np.ones((2, 2, 2)), A)
    with pytest.raises(TypeError, match="numeric"):
        g.ggml_crossprod(np.array([["a", "b"]]))
    with pytest.raises(ValueError, match="prec"):
        g.as_gpu_matrix(A, prec="bf16")


def test_integer_and_empty_matrices():
    A = np.arange(6).reshape(2, 3)
    out = g.ggml_matmul(A, A.T)
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out, A @ A.T)
    assert g.ggml_crossprod(np.ones((0, 3))).tolist() == np.zeros((3, 3)).tolist()


def test_gpu_matrix_keeps_its_device_and_prec(fake_gpu):
    gA = g.as_gpu_matrix(np.ones((2, 3)), device="gpu", prec="f16")
    assert repr(gA) == "<ggml_matrix> 2 x 3  device=gpu prec=f16"
    np.testing.assert_array_equal(gA @ np.ones((3, 1)), np.full((2, 1), 3.0))
    np.testing.assert_array_equal(np.ones((4, 2)) @ gA, np.full((4, 3), 2.0))
    assert [c[2] for c in fake_gpu] == ["f16", "f16"]


def test_the_vulkan_multiply_is_float32_and_close():
    if not g.ggml_vulkan_available():
        pytest.skip("no Vulkan device listed (GGMLPY_SOFTWARE_VULKAN=1 lists lavapipe)")
    P, Q = rng.standard_normal((64, 48)), rng.standard_normal((48, 32))
    out = g.ggml_matmul(P, Q, device="gpu")
    err = np.abs(out - P @ Q).max() / np.abs(P @ Q).max()
    assert 0 < err < 2e-3     # not the host's float64 product, and within ggmlR's bound


def test_auto_never_picks_a_software_vulkan_device(fake_gpu, monkeypatch):
    monkeypatch.setattr(linalg._VULKAN, "software", lambda: True)
    big_a, big_b = np.ones((200, 500)), np.ones((500, 200))
    g.ggml_matmul(big_a, big_b)                                   # lavapipe: the host is faster
    assert fake_gpu == []
    g.ggml_matmul(big_a, big_b, device="gpu")                     # unless asked for
    assert len(fake_gpu) == 1
