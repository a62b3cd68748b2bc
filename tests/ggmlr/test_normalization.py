"""Port of ggmlR's tests/testthat/test-normalization.R (ggmlR 0.8.2)."""
import numpy as np  # noqa: F401
import pytest  # noqa: F401

from ggmlpy import *  # noqa: F401,F403
from ggmlpy import GGMLError  # noqa: F401

from .rlike import *  # noqa: F401,F403


def test_ggml_norm_computes_layer_normalization():
    """ggml_norm computes layer normalization"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    ggml_set_f32(a, c(1, 2, 3, 4))

    result = ggml_norm(ctx, a, eps = 1e-5)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()

    input = c(1, 2, 3, 4)
    m = mean(input)
    v = var(input) * (length(input) - 1) / length(input)
    expected = (input - m) / sqrt(v + 1e-5)

    expect_equal(output, expected, tolerance = 1e-4)


def test_ggml_norm_inplace_works():
    """ggml_norm_inplace works"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    ggml_set_f32(a, c(1, 2, 3, 4))

    result = ggml_norm_inplace(ctx, a, eps = 1e-5)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()

    expect_equal(mean(output), 0, tolerance = 1e-4)
    expect_equal(sd(output) * sqrt(3/4), 1, tolerance = 1e-4)


def test_ggml_norm_on_2d_tensor_normalizes_along_first_dimension():
    """ggml_norm on 2D tensor normalizes along first dimension"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 4, 2)
    ggml_set_f32(a, c(1, 2, 3, 4, 5, 6, 7, 8))

    result = ggml_norm(ctx, a, eps = 1e-5)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    assert length(output) == 8
    assert not (any(is_na(output)))


def test_ggml_rms_norm_computes_rms_normalization():
    """ggml_rms_norm computes RMS normalization"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    ggml_set_f32(a, c(1, 2, 3, 4))

    result = ggml_rms_norm(ctx, a, eps = 1e-5)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()

    input = c(1, 2, 3, 4)
    rms = sqrt(mean(input**2) + 1e-5)
    expected = input / rms

    expect_equal(output, expected, tolerance = 1e-4)


def test_ggml_rms_norm_inplace_works():
    """ggml_rms_norm_inplace works"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    ggml_set_f32(a, c(1, 2, 3, 4))

    result = ggml_rms_norm_inplace(ctx, a, eps = 1e-5)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()

    rms_output = sqrt(mean(output**2))
    expect_equal(rms_output, 1, tolerance = 1e-4)


def test_ggml_rms_norm_with_different_epsilon_values():
    """ggml_rms_norm with different epsilon values"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    ggml_set_f32(a, c(0.001, 0.002, 0.003, 0.004))

    result = ggml_rms_norm(ctx, a, eps = 1e-3)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    assert not (any(is_na(output)))
    assert not (any(is_infinite(output)))


def test_ggml_group_norm_computes_group_normalization():
    """ggml_group_norm computes group normalization"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 4, 8)
    ggml_set_f32(a, rnorm(32))

    result = ggml_group_norm(ctx, a, n_groups = 2, eps = 1e-5)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    assert length(output) == 32
    assert not (any(is_na(output)))
    assert not (any(is_infinite(output)))


def test_ggml_group_norm_inplace_works():
    """ggml_group_norm_inplace works"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 4, 8)
    ggml_set_f32(a, rnorm(32))

    result = ggml_group_norm_inplace(ctx, a, n_groups = 2, eps = 1e-5)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    assert length(output) == 32
    assert not (any(is_na(output)))


def test_ggml_l2_norm_normalizes_to_unit_length():
    """ggml_l2_norm normalizes to unit length"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    ggml_set_f32(a, c(3, 0, 4, 0))

    result = ggml_l2_norm(ctx, a, eps = 1e-5)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()

    l2_norm = sqrt(sum(output**2))
    expect_equal(l2_norm, 1, tolerance = 1e-4)

    expect_equal(output, c(0.6, 0, 0.8, 0), tolerance = 1e-4)


def test_ggml_l2_norm_inplace_works():
    """ggml_l2_norm_inplace works"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    ggml_set_f32(a, c(1, 2, 2, 4))

    result = ggml_l2_norm_inplace(ctx, a, eps = 1e-5)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()

    l2_norm = sqrt(sum(output**2))
    expect_equal(l2_norm, 1, tolerance = 1e-4)


def test_ggml_l2_norm_handles_near_zero_vectors_with_epsilon():
    """ggml_l2_norm handles near-zero vectors with epsilon"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    ggml_set_f32(a, c(0.0001, 0.0001, 0.0001, 0.0001))

    result = ggml_l2_norm(ctx, a, eps = 1e-5)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    assert not (any(is_na(output)))
    assert not (any(is_infinite(output)))


def test_ggml_rms_norm_back_computes_gradient():
    """ggml_rms_norm_back computes gradient"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    ggml_set_f32(a, c(1, 2, 3, 4))

    b = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    ggml_set_f32(b, c(1, 1, 1, 1))

    result = ggml_rms_norm_back(ctx, a, b, eps = 1e-5)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    assert length(output) == 4
    assert not (any(is_na(output)))
    assert not (any(is_infinite(output)))


def test_normalization_handles_single_element():
    """normalization handles single element"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 1)
    ggml_set_f32(a, 5)

    result = ggml_rms_norm(ctx, a, eps = 1e-5)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    assert not (is_na(output))


def test_normalization_handles_large_tensors():
    """normalization handles large tensors"""
    ctx = ggml_init(64 * 1024 * 1024)

    n = 4096
    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, n)
    ggml_set_f32(a, rnorm(n))

    result = ggml_rms_norm(ctx, a, eps = 1e-5)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    rms_output = sqrt(mean(output**2))
    expect_equal(rms_output, 1, tolerance = 1e-3)

