"""Port of ggmlR's tests/testthat/test-cpu-backend.R (ggmlR 0.8.2)."""
import numpy as np  # noqa: F401
import pytest  # noqa: F401

from ggmlpy import *  # noqa: F401,F403
from ggmlpy import GGMLError  # noqa: F401

from .rlike import *  # noqa: F401,F403


def test_ggml_backend_cpu_init_creates_cpu_backend():
    """ggml_backend_cpu_init creates CPU backend"""
    backend = ggml_backend_cpu_init()

    expect_type(backend, "externalptr")
    assert not ((backend is None))

    ggml_backend_free(backend)


def test_ggml_backend_name_returns_cpu_for_cpu_backend():
    """ggml_backend_name returns 'CPU' for CPU backend"""
    backend = ggml_backend_cpu_init()

    name = ggml_backend_name(backend)
    expect_type(name, "character")
    expect_equal(name, "CPU")


def test_ggml_backend_cpu_set_n_threads_works():
    """ggml_backend_cpu_set_n_threads works"""
    backend = ggml_backend_cpu_init()

    for n in (1, 4, 8):
        ggml_backend_cpu_set_n_threads(backend, n)
        assert backend.n_threads == n


def test_ggml_backend_free_works_without_error():
    """ggml_backend_free works without error"""
    backend = ggml_backend_cpu_init()
    ggml_backend_free(backend)
    assert backend.freed
    ggml_backend_free(backend)  # twice: safe


def test_cpu_backend_computes_simple_addition():
    """CPU backend computes simple addition"""
    ctx = ggml_init(16 * 1024 * 1024)
    ggml_set_no_alloc(ctx, True)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    b = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    result = ggml_add(ctx, a, b)

    backend = ggml_backend_cpu_init()
    buffer = ggml_backend_alloc_ctx_tensors(ctx, backend)

    ggml_backend_tensor_set_data(a, c(1, 2, 3, 4, 5))
    ggml_backend_tensor_set_data(b, c(10, 20, 30, 40, 50))

    graph = ggml_build_forward_expand(ctx, result)
    status = ggml_backend_graph_compute(backend, graph)

    expect_equal(status, 0)

    output = ggml_backend_tensor_get_data(result)
    expect_equal(output, c(11, 22, 33, 44, 55), tolerance = 1e-5)

    ggml_backend_buffer_free(buffer)
    ggml_backend_free(backend)
    ggml_free(ctx)


def test_cpu_backend_computes_subtraction():
    """CPU backend computes subtraction"""
    ctx = ggml_init(16 * 1024 * 1024)
    ggml_set_no_alloc(ctx, True)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    b = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    result = ggml_sub(ctx, a, b)

    backend = ggml_backend_cpu_init()
    buffer = ggml_backend_alloc_ctx_tensors(ctx, backend)

    ggml_backend_tensor_set_data(a, c(10, 20, 30, 40, 50))
    ggml_backend_tensor_set_data(b, c(1, 2, 3, 4, 5))

    graph = ggml_build_forward_expand(ctx, result)
    status = ggml_backend_graph_compute(backend, graph)

    expect_equal(status, 0)

    output = ggml_backend_tensor_get_data(result)
    expect_equal(output, c(9, 18, 27, 36, 45), tolerance = 1e-5)

    ggml_backend_buffer_free(buffer)
    ggml_backend_free(backend)
    ggml_free(ctx)


def test_cpu_backend_computes_multiplication():
    """CPU backend computes multiplication"""
    ctx = ggml_init(16 * 1024 * 1024)
    ggml_set_no_alloc(ctx, True)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    b = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    result = ggml_mul(ctx, a, b)

    backend = ggml_backend_cpu_init()
    buffer = ggml_backend_alloc_ctx_tensors(ctx, backend)

    ggml_backend_tensor_set_data(a, c(1, 2, 3, 4, 5))
    ggml_backend_tensor_set_data(b, c(2, 3, 4, 5, 6))

    graph = ggml_build_forward_expand(ctx, result)
    status = ggml_backend_graph_compute(backend, graph)

    expect_equal(status, 0)

    output = ggml_backend_tensor_get_data(result)
    expect_equal(output, c(2, 6, 12, 20, 30), tolerance = 1e-5)

    ggml_backend_buffer_free(buffer)
    ggml_backend_free(backend)
    ggml_free(ctx)


def test_cpu_backend_computes_division():
    """CPU backend computes division"""
    ctx = ggml_init(16 * 1024 * 1024)
    ggml_set_no_alloc(ctx, True)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    b = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    result = ggml_div(ctx, a, b)

    backend = ggml_backend_cpu_init()
    buffer = ggml_backend_alloc_ctx_tensors(ctx, backend)

    ggml_backend_tensor_set_data(a, c(10, 20, 30, 40, 50))
    ggml_backend_tensor_set_data(b, c(2, 4, 5, 8, 10))

    graph = ggml_build_forward_expand(ctx, result)
    status = ggml_backend_graph_compute(backend, graph)

    expect_equal(status, 0)

    output = ggml_backend_tensor_get_data(result)
    expect_equal(output, c(5, 5, 6, 5, 5), tolerance = 1e-5)

    ggml_backend_buffer_free(buffer)
    ggml_backend_free(backend)
    ggml_free(ctx)


def test_cpu_backend_computation_with_multiple_threads():
    """CPU backend computation with multiple threads"""
    ctx = ggml_init(64 * 1024 * 1024)
    ggml_set_no_alloc(ctx, True)

    n = 10000
    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, n)
    b = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, n)
    result = ggml_add(ctx, a, b)

    backend = ggml_backend_cpu_init()
    ggml_backend_cpu_set_n_threads(backend, 4)
    buffer = ggml_backend_alloc_ctx_tensors(ctx, backend)

    a_data = as_numeric(seq(1, n))
    b_data = as_numeric(seq(n, 1))
    ggml_backend_tensor_set_data(a, a_data)
    ggml_backend_tensor_set_data(b, b_data)

    graph = ggml_build_forward_expand(ctx, result)
    status = ggml_backend_graph_compute(backend, graph)

    expect_equal(status, 0)

    output = ggml_backend_tensor_get_data(result)
    expect_equal(output, rep(n + 1, n), tolerance = 1e-4)

    ggml_backend_buffer_free(buffer)
    ggml_backend_free(backend)
    ggml_free(ctx)


def test_cpu_backend_computes_chained_operations():
    """CPU backend computes chained operations"""
    ctx = ggml_init(16 * 1024 * 1024)
    ggml_set_no_alloc(ctx, True)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)

    sqr_a = ggml_sqr(ctx, a)
    result = ggml_sqrt(ctx, sqr_a)

    backend = ggml_backend_cpu_init()
    buffer = ggml_backend_alloc_ctx_tensors(ctx, backend)

    ggml_backend_tensor_set_data(a, c(-3, -1, 0, 1, 3))

    graph = ggml_build_forward_expand(ctx, result)
    status = ggml_backend_graph_compute(backend, graph)

    expect_equal(status, 0)

    output = ggml_backend_tensor_get_data(result)
    expect_equal(output, c(3, 1, 0, 1, 3), tolerance = 1e-5)

    ggml_backend_buffer_free(buffer)
    ggml_backend_free(backend)
    ggml_free(ctx)


def test_cpu_backend_computes_matrix_multiplication():
    """CPU backend computes matrix multiplication"""
    ctx = ggml_init(16 * 1024 * 1024)
    ggml_set_no_alloc(ctx, True)

    a = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 4, 3)
    b = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 4, 2)
    result = ggml_mul_mat(ctx, a, b)

    backend = ggml_backend_cpu_init()
    buffer = ggml_backend_alloc_ctx_tensors(ctx, backend)

    ggml_backend_tensor_set_data(a, rep(1, 12))
    ggml_backend_tensor_set_data(b, rep(1, 8))

    graph = ggml_build_forward_expand(ctx, result)
    status = ggml_backend_graph_compute(backend, graph)

    expect_equal(status, 0)

    output = ggml_backend_tensor_get_data(result)
    assert length(output) == 6
    assert not (any(is_na(output)))
    expect_equal(output, rep(4, 6), tolerance = 1e-5)

    ggml_backend_buffer_free(buffer)
    ggml_backend_free(backend)
    ggml_free(ctx)


def test_cpu_backend_computes_rms_normalization():
    """CPU backend computes RMS normalization"""
    ctx = ggml_init(16 * 1024 * 1024)
    ggml_set_no_alloc(ctx, True)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    result = ggml_rms_norm(ctx, a, 1e-5)

    backend = ggml_backend_cpu_init()
    buffer = ggml_backend_alloc_ctx_tensors(ctx, backend)

    input = c(1, 2, 3, 4)
    ggml_backend_tensor_set_data(a, input)

    graph = ggml_build_forward_expand(ctx, result)
    status = ggml_backend_graph_compute(backend, graph)

    expect_equal(status, 0)

    output = ggml_backend_tensor_get_data(result)

    rms = sqrt(mean(input**2))
    expected = input / rms
    expect_equal(output, expected, tolerance = 1e-4)

    ggml_backend_buffer_free(buffer)
    ggml_backend_free(backend)
    ggml_free(ctx)


def test_cpu_backend_computes_softmax():
    """CPU backend computes softmax"""
    ctx = ggml_init(16 * 1024 * 1024)
    ggml_set_no_alloc(ctx, True)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    result = ggml_soft_max(ctx, a)

    backend = ggml_backend_cpu_init()
    buffer = ggml_backend_alloc_ctx_tensors(ctx, backend)

    input = c(1, 2, 3, 4, 5)
    ggml_backend_tensor_set_data(a, input)

    graph = ggml_build_forward_expand(ctx, result)
    status = ggml_backend_graph_compute(backend, graph)

    expect_equal(status, 0)

    output = ggml_backend_tensor_get_data(result)

    assert all(output >= 0)
    assert all(output <= 1)
    expect_equal(sum(output), 1, tolerance = 1e-5)

    assert all(diff(output) > 0)

    ggml_backend_buffer_free(buffer)
    ggml_backend_free(backend)
    ggml_free(ctx)


def test_cpu_backend_computes_on_2d_tensors():
    """CPU backend computes on 2D tensors"""
    ctx = ggml_init(16 * 1024 * 1024)
    ggml_set_no_alloc(ctx, True)

    a = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 4, 3)
    b = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 4, 3)
    result = ggml_add(ctx, a, b)

    backend = ggml_backend_cpu_init()
    buffer = ggml_backend_alloc_ctx_tensors(ctx, backend)

    ggml_backend_tensor_set_data(a, as_numeric(rng(1, 12)))
    ggml_backend_tensor_set_data(b, rep(10.0, 12))

    graph = ggml_build_forward_expand(ctx, result)
    status = ggml_backend_graph_compute(backend, graph)

    expect_equal(status, 0)

    output = ggml_backend_tensor_get_data(result)
    expect_equal(output, rng(11, 22), tolerance = 1e-5)

    ggml_backend_buffer_free(buffer)
    ggml_backend_free(backend)
    ggml_free(ctx)


def test_cpu_backend_computes_transpose():
    """CPU backend computes transpose"""
    ctx = ggml_init(16 * 1024 * 1024)
    ggml_set_no_alloc(ctx, True)

    a = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 3, 4)
    result = ggml_transpose(ctx, a)

    backend = ggml_backend_cpu_init()
    buffer = ggml_backend_alloc_ctx_tensors(ctx, backend)

    ggml_backend_tensor_set_data(a, as_numeric(rng(1, 12)))

    graph = ggml_build_forward_expand(ctx, result)
    status = ggml_backend_graph_compute(backend, graph)

    expect_equal(status, 0)

    shape = ggml_tensor_shape(result)
    expect_equal(shape[0], 4)
    expect_equal(shape[1], 3)

    ggml_backend_buffer_free(buffer)
    ggml_backend_free(backend)
    ggml_free(ctx)


def test_cpu_backend_computes_gelu():
    """CPU backend computes GELU"""
    ctx = ggml_init(16 * 1024 * 1024)
    ggml_set_no_alloc(ctx, True)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    result = ggml_gelu(ctx, a)

    backend = ggml_backend_cpu_init()
    buffer = ggml_backend_alloc_ctx_tensors(ctx, backend)

    input = c(-2, -1, 0, 1, 2)
    ggml_backend_tensor_set_data(a, input)

    graph = ggml_build_forward_expand(ctx, result)
    status = ggml_backend_graph_compute(backend, graph)

    expect_equal(status, 0)

    output = ggml_backend_tensor_get_data(result)

    assert not (any(is_na(output)))
    assert not (any(is_infinite(output)))
    expect_equal(output[2], 0, tolerance = 1e-5)
    assert output[4] > output[3]
    assert output[3] > output[2]

    ggml_backend_buffer_free(buffer)
    ggml_backend_free(backend)
    ggml_free(ctx)


def test_cpu_backend_computes_silu_swish():
    """CPU backend computes SILU (SwiSH)"""
    ctx = ggml_init(16 * 1024 * 1024)
    ggml_set_no_alloc(ctx, True)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    result = ggml_silu(ctx, a)

    backend = ggml_backend_cpu_init()
    buffer = ggml_backend_alloc_ctx_tensors(ctx, backend)

    input = c(-2, -1, 0, 1, 2)
    ggml_backend_tensor_set_data(a, input)

    graph = ggml_build_forward_expand(ctx, result)
    status = ggml_backend_graph_compute(backend, graph)

    expect_equal(status, 0)

    output = ggml_backend_tensor_get_data(result)

    expect_equal(output[2], 0, tolerance = 1e-5)
    assert not (any(is_na(output)))

    ggml_backend_buffer_free(buffer)
    ggml_backend_free(backend)
    ggml_free(ctx)


def test_cpu_backend_computes_relu():
    """CPU backend computes ReLU"""
    ctx = ggml_init(16 * 1024 * 1024)
    ggml_set_no_alloc(ctx, True)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    result = ggml_relu(ctx, a)

    backend = ggml_backend_cpu_init()
    buffer = ggml_backend_alloc_ctx_tensors(ctx, backend)

    input = c(-2, -1, 0, 1, 2)
    ggml_backend_tensor_set_data(a, input)

    graph = ggml_build_forward_expand(ctx, result)
    status = ggml_backend_graph_compute(backend, graph)

    expect_equal(status, 0)

    output = ggml_backend_tensor_get_data(result)
    expect_equal(output, c(0, 0, 0, 1, 2), tolerance = 1e-5)

    ggml_backend_buffer_free(buffer)
    ggml_backend_free(backend)
    ggml_free(ctx)


def test_cpu_backend_produces_same_results_as_ggml_graph_compute():
    """CPU backend produces same results as ggml_graph_compute"""
    ctx1 = ggml_init(16 * 1024 * 1024)
    a1 = ggml_new_tensor_1d(ctx1, GGML_TYPE_F32, 5)
    ggml_set_f32(a1, c(1, 2, 3, 4, 5))
    r1 = ggml_sqr(ctx1, a1)
    graph1 = ggml_build_forward_expand(ctx1, r1)
    ggml_graph_compute(ctx1, graph1)
    result1 = ggml_get_f32(r1).ravel()
    ggml_free(ctx1)

    ctx2 = ggml_init(16 * 1024 * 1024)
    ggml_set_no_alloc(ctx2, True)
    a2 = ggml_new_tensor_1d(ctx2, GGML_TYPE_F32, 5)
    r2 = ggml_sqr(ctx2, a2)

    backend = ggml_backend_cpu_init()
    buffer = ggml_backend_alloc_ctx_tensors(ctx2, backend)
    ggml_backend_tensor_set_data(a2, c(1, 2, 3, 4, 5))

    graph2 = ggml_build_forward_expand(ctx2, r2)
    ggml_backend_graph_compute(backend, graph2)
    result2 = ggml_backend_tensor_get_data(r2)

    ggml_backend_buffer_free(buffer)
    ggml_backend_free(backend)
    ggml_free(ctx2)

    expect_equal(result1, result2, tolerance = 1e-6)
    expect_equal(result1, c(1, 4, 9, 16, 25))


def test_cpu_backend_computes_swiglu():
    """CPU backend computes SwiGLU"""
    ctx = ggml_init(16 * 1024 * 1024)
    ggml_set_no_alloc(ctx, True)

    x = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 256)
    result = ggml_swiglu(ctx, x)

    backend = ggml_backend_cpu_init()
    buffer = ggml_backend_alloc_ctx_tensors(ctx, backend)

    x_data = seq(-2, 2, length_out = 256)
    ggml_backend_tensor_set_data(x, x_data)

    graph = ggml_build_forward_expand(ctx, result)
    status = ggml_backend_graph_compute(backend, graph)

    expect_equal(status, 0)

    output = ggml_backend_tensor_get_data(result)

    assert length(output) == 128
    assert not (any(is_na(output)))
    assert not (any(is_infinite(output)))

    ggml_backend_buffer_free(buffer)
    ggml_backend_free(backend)
    ggml_free(ctx)


def test_cpu_backend_handles_empty_graph_gracefully():
    """CPU backend handles empty graph gracefully"""
    ctx = ggml_init(1024 * 1024)
    ggml_set_no_alloc(ctx, True)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)

    backend = ggml_backend_cpu_init()
    buffer = ggml_backend_alloc_ctx_tensors(ctx, backend)

    graph = ggml_build_forward_expand(ctx, a)

    status = ggml_backend_graph_compute(backend, graph)
    expect_equal(status, 0)

    ggml_backend_buffer_free(buffer)
    ggml_backend_free(backend)
    ggml_free(ctx)

