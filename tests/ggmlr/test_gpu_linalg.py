"""Port of ggmlR's tests/testthat/test-gpu-linalg.R: ggml_matmul / crossprod / tcrossprod /
matmul_f64 and the as_gpu_matrix wrapper.

The host path is float64, as R's %*%, so it is compared at testthat's tolerance (R_TOL). R's
dimnames have no numpy counterpart (R-only), so the dimnames expectations are left out of the
blocks that also check numbers. R's set.seed()/rnorm() draws are numpy draws here: every
expectation compares two computations on the same draws, so the draws' values do not matter.
"""
import numpy as np
import pytest

import ggmlpy as g

from ._backends import skip_without_vulkan
from .conftest import R_TOL, expect_equal

_rng = np.random.default_rng(42)
A = _rng.standard_normal((3, 4))
B = _rng.standard_normal((4, 5))


def relerr(a, b):
    return np.abs(a - b).max() / np.abs(b).max()


def test_ggml_matmul_on_cpu_reproduces_matmul_including_dimnames():
    out = g.ggml_matmul(A, B, device="cpu")
    expect_equal(out, A @ B, **R_TOL)
    assert out.shape == (3, 5) and out.dtype == np.float64


def test_crossprod_and_tcrossprod_reproduce_base_r_on_cpu():
    expect_equal(g.ggml_crossprod(A, device="cpu"), A.T @ A, **R_TOL)
    expect_equal(g.ggml_crossprod(A, B[:3, :], device="cpu"), A.T @ B[:3, :], **R_TOL)
    expect_equal(g.ggml_tcrossprod(A, device="cpu"), A @ A.T, **R_TOL)
    expect_equal(g.ggml_tcrossprod(A, A, device="cpu"), A @ A.T, **R_TOL)


def test_non_conformable_inputs_error():
    with pytest.raises(ValueError, match="non-conformable"):
        g.ggml_matmul(A, A, device="cpu")
    with pytest.raises(ValueError, match="non-conformable"):
        g.ggml_crossprod(A, B, device="cpu")      # 3 vs 4 rows
    with pytest.raises(ValueError, match="non-conformable"):
        g.ggml_tcrossprod(A, B, device="cpu")     # 4 vs 5 cols


def test_device_auto_below_the_size_gate_stays_on_the_cpu():
    expect_equal(g.ggml_matmul(A, B, device="auto"), A @ B, **R_TOL)


def test_as_gpu_matrix_wraps_and_matmul_dispatches_to_the_gpu_path():
    gA = g.as_gpu_matrix(A, device="cpu")
    assert isinstance(gA, g.GGMLMatrix)          # expect_s4_class(gA, "ggml_matrix")
    assert gA.shape == A.shape
    assert np.array_equal(np.asarray(gA), A)     # as.matrix(gA) identical to A

    expect_equal(gA @ B, A @ B, **R_TOL)
    expect_equal(A @ g.as_gpu_matrix(B, device="cpu"), A @ B, **R_TOL)
    expect_equal(g.as_gpu_matrix(A, device="cpu") @ g.as_gpu_matrix(B, device="cpu"), A @ B, **R_TOL)


def test_crossprod_and_tcrossprod_dispatch_on_a_wrapped_matrix():
    gA = g.as_gpu_matrix(A, device="cpu")
    expect_equal(gA.crossprod(), A.T @ A, **R_TOL)
    expect_equal(gA.tcrossprod(), A @ A.T, **R_TOL)


def test_a_vector_operand_is_treated_as_a_1_column_matrix_like_base_r():
    v = _rng.standard_normal(4)
    expect_equal(g.ggml_matmul(A, v, device="cpu"), (A @ v).reshape(3, 1), **R_TOL)


@skip_without_vulkan
def test_gpu_path_approximates_base_r_driver_dependent_precision():
    rng = np.random.default_rng(7)
    P = rng.standard_normal((400, 300))
    Q = rng.standard_normal((300, 200))
    assert relerr(g.ggml_matmul(P, Q, device="gpu", prec="f32"), P @ Q) < 2e-3
    assert relerr(g.ggml_crossprod(P, device="gpu", prec="f32"), P.T @ P) < 2e-3
    assert relerr(g.ggml_tcrossprod(Q, device="gpu", prec="f32"), Q @ Q.T) < 2e-3
    # R: unnamed inputs give no dimnames (R-only); here, a plain float64 array of the right shape
    out = g.ggml_matmul(P, Q, device="gpu")
    assert isinstance(out, np.ndarray) and out.shape == (400, 200) and out.dtype == np.float64


def test_ggml_matmul_f64_on_cpu_is_exact_double_with_dimnames_like_base_r():
    expect_equal(g.ggml_matmul_f64(A, B, device="cpu"), A @ B, **R_TOL)
    assert g.ggml_matmul_f64(A, B, device="cpu").shape == (3, 5)
    with pytest.raises(ValueError, match="non-conformable"):
        g.ggml_matmul_f64(A, A, device="cpu")
    U, V = _rng.standard_normal((2, 3)), _rng.standard_normal((3, 4))
    assert isinstance(g.ggml_matmul_f64(U, V, device="cpu"), np.ndarray)


def test_ggml_matmul_f64_gpu_path_matches_base_r_to_double_precision():
    """ggmlR skips this without a GPU; ggmlpy's f64 product is always the host's float64 one
    (ggml 0.25.3 has no f64 kernel), so it runs everywhere."""
    rng = np.random.default_rng(11)
    P = rng.standard_normal((200, 150))
    Q = rng.standard_normal((150, 100))
    assert relerr(g.ggml_matmul_f64(P, Q, device="gpu"), P @ Q) < 1e-10
