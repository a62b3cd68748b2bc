"""ggml's BLAS backend as the CPU device's helper for products with a transposed operand, where
ggmlpy's own OpenBLAS product op (ggmlpy.kernels.gemm) is off or missing."""
import numpy as np
import pytest

import ggmlpy as g
from ggmlpy import kernels
from ggmlpy.runtime.state import STATE
from ggmlpy.bindings import lib


@pytest.fixture(params=["ggml", "kernels"])
def products(request):
    """Products as ggml's (BLAS backend) or as ggmlpy's gemm kernel: the setting for the test."""
    use_kernels = request.param == "kernels"
    if use_kernels and (kernels.get() is None or kernels.get().gemm is None):
        pytest.skip("no ggmlpy.kernels gemm here")
    prev = kernels.set_enabled(use_kernels)
    STATE.context("cpu").executor.clear()
    yield request.param
    kernels.set_enabled(prev)
    STATE.context("cpu").executor.clear()

HAS_BLAS = "BLAS" in g.backends()
needs_blas = pytest.mark.skipif(not HAS_BLAS, reason="this libggml has no BLAS backend "
                                "(apt-get install libopenblas-openmp-dev; python build_ggml.py --backend auto)")


@needs_blas
def test_blas_is_not_a_device_to_compute_on():
    with pytest.raises(g.DeviceError, match="use ag_device\\('cpu'\\)"):
        g.ag_device("BLAS")
    assert g.ag_device_name() == "CPU"


def _graphs_on_blas():
    ex = STATE.context("cpu").executor  # this thread's: its own CPU and BLAS backends
    return [c for c in ex.cache.values() if c.backend_ptr == ex.blas.ptr]


@needs_blas
@pytest.mark.parametrize("ta,tb", [(False, False), (False, True), (True, False), (True, True)])
def test_big_products_and_their_gradients_match_numpy(ta, tb, products):
    rng = np.random.default_rng(0)
    A, B = rng.normal(size=(40, 48)), rng.normal(size=(48, 36))
    a = g.ag_param(A.T.copy() if ta else A)
    b = g.ag_param(B.T.copy() if tb else B)
    STATE.context("cpu").executor.clear()
    with g.with_grad_tape():
        y = g.ag_matmul(g.ag_transpose(a) if ta else a, g.ag_transpose(b) if tb else b)
        loss = g.ag_sum(g.ag_mul(y, y))
    grads = g.backward(loss)
    np.testing.assert_allclose(y.numpy(), A @ B, rtol=1e-5, atol=1e-4)
    gy = 2 * A @ B
    ga, gb = gy @ B.T, A.T @ gy
    np.testing.assert_allclose(grads[a].numpy(), ga.T if ta else ga, rtol=1e-5, atol=1e-3)
    np.testing.assert_allclose(grads[b].numpy(), gb.T if tb else gb, rtol=1e-5, atol=1e-3)
    if products == "ggml":
        assert _graphs_on_blas()  # a %*% b and its gradients ran as OUT_PROD on BLAS
    else:  # ...or as ggmlpy's product op on the CPU backend, no copies
        ex = STATE.context("cpu").executor
        nodes = [p.op for c in ex.cache.values() for p in c.nodes]
        assert not _graphs_on_blas() and lib.GGML_OP_CUSTOM in nodes and lib.GGML_OP_MUL_MAT not in nodes


@needs_blas
def test_f16_storage_and_small_products_stay_on_the_cpu_backend(products):
    rng = np.random.default_rng(1)
    small = g.ag_tensor(rng.normal(size=(8, 8)))
    STATE.context("cpu").executor.clear()
    g.ag_matmul(small, small)
    assert not _graphs_on_blas()
    g.ag_dtype("f16")
    try:
        x = g.ag_tensor(rng.normal(size=(64, 64)))
        np.testing.assert_allclose(g.ag_matmul(x, x).numpy(), x.numpy() @ x.numpy(), rtol=2e-2, atol=0.2)
        assert not _graphs_on_blas()  # BLAS gets whole graphs of products: no casts
    finally:
        g.ag_dtype("f32")
