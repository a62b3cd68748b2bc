"""Port of ggmlR's tests/testthat/test-activations.R (ggmlR 0.8.2)."""
import numpy as np  # noqa: F401
import pytest  # noqa: F401

from ggmlpy import *  # noqa: F401,F403
from ggmlpy import GGMLError  # noqa: F401

from .rlike import *  # noqa: F401,F403


def test_relu_produces_correct_output():
    """relu produces correct output"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    ggml_set_f32(a, c(-2, -1, 0, 1, 2))

    r = ggml_relu(ctx, a)
    graph = ggml_build_forward_expand(ctx, r)
    ggml_graph_compute(ctx, graph)

    result = ggml_get_f32(r).ravel()
    expect_equal(result, c(0, 0, 0, 1, 2), tolerance = 1e-5)

    ggml_free(ctx)


def test_sigmoid_produces_values_in_0_1():
    """sigmoid produces values in (0,1)"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    ggml_set_f32(a, c(-10, -1, 0, 1, 10))

    s = ggml_sigmoid(ctx, a)
    graph = ggml_build_forward_expand(ctx, s)
    ggml_graph_compute(ctx, graph)

    result = ggml_get_f32(s).ravel()

    assert all(result > 0)
    assert all(result < 1)

    expect_equal(result[2], 0.5, tolerance = 1e-5)

    ggml_free(ctx)


def test_tanh_produces_values_in_1_1():
    """tanh produces values in [-1,1]"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    ggml_set_f32(a, c(-2, -1, 0, 1, 2))

    t = ggml_tanh(ctx, a)
    graph = ggml_build_forward_expand(ctx, t)
    ggml_graph_compute(ctx, graph)

    result = ggml_get_f32(t).ravel()

    assert all(result >= -1)
    assert all(result <= 1)

    expect_equal(result[2], 0, tolerance = 1e-5)

    expect_equal(result[0], -result[4], tolerance = 1e-5)

    ggml_free(ctx)


def test_gelu_produces_expected_pattern():
    """gelu produces expected pattern"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    ggml_set_f32(a, c(-2, -1, 0, 1, 2))

    g = ggml_gelu(ctx, a)
    graph = ggml_build_forward_expand(ctx, g)
    ggml_graph_compute(ctx, graph)

    result = ggml_get_f32(g).ravel()

    expect_equal(result[2], 0, tolerance = 1e-5)

    assert result[3] < result[4]

    ggml_free(ctx)


def test_gelu_quick_produces_similar_results_to_gelu():
    """gelu_quick produces similar results to gelu"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    ggml_set_f32(a, c(-2, -1, 0, 1, 2))

    g = ggml_gelu(ctx, a)
    graph = ggml_build_forward_expand(ctx, g)
    ggml_graph_compute(ctx, graph)
    gelu_result = ggml_get_f32(g).ravel()

    ggml_reset(ctx)

    a2 = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    ggml_set_f32(a2, c(-2, -1, 0, 1, 2))
    gq = ggml_gelu_quick(ctx, a2)
    graph2 = ggml_build_forward_expand(ctx, gq)
    ggml_graph_compute(ctx, graph2)
    quick_result = ggml_get_f32(gq).ravel()

    expect_equal(quick_result[2], gelu_result[2], tolerance = 0.1)

    ggml_free(ctx)


def test_silu_produces_expected_pattern():
    """silu produces expected pattern"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    ggml_set_f32(a, c(-2, -1, 0, 1, 2))

    s = ggml_silu(ctx, a)
    graph = ggml_build_forward_expand(ctx, s)
    ggml_graph_compute(ctx, graph)

    result = ggml_get_f32(s).ravel()

    expect_equal(result[2], 0, tolerance = 1e-5)

    assert result[4] > 1.5

    ggml_free(ctx)


def test_softmax_produces_valid_probability_distribution():
    """softmax produces valid probability distribution"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    ggml_set_f32(a, c(1, 2, 3, 4, 5))

    s = ggml_soft_max(ctx, a)
    graph = ggml_build_forward_expand(ctx, s)
    ggml_graph_compute(ctx, graph)

    result = ggml_get_f32(s).ravel()

    assert all(result > 0)

    expect_equal(sum(result), 1, tolerance = 1e-5)

    assert all(diff(result) > 0)

    ggml_free(ctx)


def test_ggml_elu_produces_correct_output():
    """ggml_elu produces correct output"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    ggml_set_f32(a, c(-2, -1, 0, 1))

    result = ggml_elu(ctx, a)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    expect_equal(output[2], 0, tolerance = 1e-5)
    expect_equal(output[3], 1, tolerance = 1e-5)
    assert output[0] < 0
    assert output[1] < 0


def test_ggml_leaky_relu_produces_correct_output():
    """ggml_leaky_relu produces correct output"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    ggml_set_f32(a, c(-2, -1, 0, 1))

    result = ggml_leaky_relu(ctx, a, 0.01, False)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    expect_equal(output[0], -2 * 0.01, tolerance = 1e-5)
    expect_equal(output[3], 1, tolerance = 1e-5)


def test_ggml_hardswish_produces_correct_output():
    """ggml_hardswish produces correct output"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    ggml_set_f32(a, c(-4, -3, 0, 3, 4))

    result = ggml_hardswish(ctx, a)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    expect_equal(output[0], 0, tolerance = 1e-5)
    expect_equal(output[1], 0, tolerance = 1e-5)
    expect_equal(output[2], 0, tolerance = 1e-5)
    expect_equal(output[3], 3, tolerance = 1e-5)
    expect_equal(output[4], 4, tolerance = 1e-5)


def test_ggml_hardsigmoid_produces_correct_output():
    """ggml_hardsigmoid produces correct output"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    ggml_set_f32(a, c(-4, -3, 0, 3, 4))

    result = ggml_hardsigmoid(ctx, a)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    expect_equal(output[0], 0, tolerance = 1e-5)
    expect_equal(output[2], 0.5, tolerance = 1e-5)
    expect_equal(output[4], 1, tolerance = 1e-5)


def test_ggml_softplus_produces_correct_output():
    """ggml_softplus produces correct output"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 3)
    ggml_set_f32(a, c(-1, 0, 1))

    result = ggml_softplus(ctx, a)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    expect_equal(output[1], log(2), tolerance = 1e-4)
    assert all(output > 0)


def test_ggml_gelu_erf_produces_correct_output():
    """ggml_gelu_erf produces correct output"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 3)
    ggml_set_f32(a, c(-1, 0, 1))

    result = ggml_gelu_erf(ctx, a)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    expect_equal(output[1], 0, tolerance = 1e-5)
    assert output[0] < 0
    assert output[2] > 0

