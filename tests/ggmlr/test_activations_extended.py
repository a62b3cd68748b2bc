"""Port of ggmlR's tests/testthat/test-activations-extended.R (ggmlR 0.8.2)."""
import numpy as np  # noqa: F401
import pytest  # noqa: F401

from ggmlpy import *  # noqa: F401,F403
from ggmlpy import GGMLError  # noqa: F401

from .rlike import *  # noqa: F401,F403


def test_ggml_sigmoid_computes_sigmoid_correctly():
    """ggml_sigmoid computes sigmoid correctly"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    ggml_set_f32(a, c(-2, -1, 0, 1, 2))

    result = ggml_sigmoid(ctx, a)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()

    expected = 1 / (1 + exp(-c(-2, -1, 0, 1, 2)))
    expect_equal(output, expected, tolerance = 1e-4)


def test_ggml_sigmoid_0_0_5():
    """ggml_sigmoid(0) = 0.5"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 1)
    ggml_set_f32(a, 0)

    result = ggml_sigmoid(ctx, a)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    expect_equal(output, 0.5, tolerance = 1e-5)


def test_ggml_sigmoid_output_is_in_0_1():
    """ggml_sigmoid output is in (0, 1)"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 100)
    ggml_set_f32(a, seq(-10, 10, length_out = 100))

    result = ggml_sigmoid(ctx, a)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    assert all(output > 0)
    assert all(output < 1)


def test_ggml_tanh_computes_tanh_correctly():
    """ggml_tanh computes tanh correctly"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    ggml_set_f32(a, c(-2, -1, 0, 1, 2))

    result = ggml_tanh(ctx, a)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    expected = tanh(c(-2, -1, 0, 1, 2))
    expect_equal(output, expected, tolerance = 1e-4)


def test_ggml_tanh_0_0():
    """ggml_tanh(0) = 0"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 1)
    ggml_set_f32(a, 0)

    result = ggml_tanh(ctx, a)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    expect_equal(output, 0, tolerance = 1e-5)


def test_ggml_tanh_output_is_in_1_1():
    """ggml_tanh output is in [-1, 1]"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 100)
    ggml_set_f32(a, seq(-10, 10, length_out = 100))

    result = ggml_tanh(ctx, a)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    assert all(output >= -1)
    assert all(output <= 1)


def test_ggml_elu_computes_elu_correctly():
    """ggml_elu computes ELU correctly"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    ggml_set_f32(a, c(-2, -1, 0, 1, 2))

    result = ggml_elu(ctx, a)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()

    input = c(-2, -1, 0, 1, 2)
    expected = ifelse(input > 0, input, exp(input) - 1)
    expect_equal(output, expected, tolerance = 1e-4)


def test_ggml_elu_0_0():
    """ggml_elu(0) = 0"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 1)
    ggml_set_f32(a, 0)

    result = ggml_elu(ctx, a)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    expect_equal(output, 0, tolerance = 1e-5)


def test_ggml_leaky_relu_computes_correctly():
    """ggml_leaky_relu computes correctly"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    ggml_set_f32(a, c(-2, -1, 0, 1, 2))

    result = ggml_leaky_relu(ctx, a, negative_slope = 0.1)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()

    expected = c(-0.2, -0.1, 0, 1, 2)
    expect_equal(output, expected, tolerance = 1e-4)


def test_ggml_leaky_relu_with_different_slopes():
    """ggml_leaky_relu with different slopes"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 3)
    ggml_set_f32(a, c(-2, 0, 2))

    result = ggml_leaky_relu(ctx, a, negative_slope = 0.2)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    expect_equal(output, c(-0.4, 0, 2), tolerance = 1e-4)


def test_ggml_hardswish_computes_correctly():
    """ggml_hardswish computes correctly"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 7)
    ggml_set_f32(a, c(-4, -3, -1, 0, 1, 3, 4))

    result = ggml_hardswish(ctx, a)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()

    input = c(-4, -3, -1, 0, 1, 3, 4)
    expected = input * pmin(pmax(input + 3, 0), 6) / 6
    expect_equal(output, expected, tolerance = 1e-4)


def test_ggml_hardswish_0_0():
    """ggml_hardswish(0) = 0"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 1)
    ggml_set_f32(a, 0)

    result = ggml_hardswish(ctx, a)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    expect_equal(output, 0, tolerance = 1e-5)


def test_ggml_hardsigmoid_computes_correctly():
    """ggml_hardsigmoid computes correctly"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 7)
    ggml_set_f32(a, c(-4, -3, -1, 0, 1, 3, 4))

    result = ggml_hardsigmoid(ctx, a)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()

    input = c(-4, -3, -1, 0, 1, 3, 4)
    expected = pmin(pmax(input + 3, 0), 6) / 6
    expect_equal(output, expected, tolerance = 1e-4)


def test_ggml_hardsigmoid_output_is_in_0_1():
    """ggml_hardsigmoid output is in [0, 1]"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 100)
    ggml_set_f32(a, seq(-10, 10, length_out = 100))

    result = ggml_hardsigmoid(ctx, a)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    assert all(output >= 0)
    assert all(output <= 1)


def test_ggml_softplus_computes_correctly():
    """ggml_softplus computes correctly"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    ggml_set_f32(a, c(-2, -1, 0, 1, 2))

    result = ggml_softplus(ctx, a)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()

    expected = log(1 + exp(c(-2, -1, 0, 1, 2)))
    expect_equal(output, expected, tolerance = 1e-4)


def test_ggml_softplus_is_always_positive():
    """ggml_softplus is always positive"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 100)
    ggml_set_f32(a, seq(-10, 10, length_out = 100))

    result = ggml_softplus(ctx, a)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    assert all(output > 0)


def test_ggml_softplus_0_log_2():
    """ggml_softplus(0) = log(2)"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 1)
    ggml_set_f32(a, 0)

    result = ggml_softplus(ctx, a)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    expect_equal(output, log(2), tolerance = 1e-5)


def test_ggml_gelu_quick_computes_fast_gelu():
    """ggml_gelu_quick computes fast GELU"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    ggml_set_f32(a, c(-2, -1, 0, 1, 2))

    result = ggml_gelu_quick(ctx, a)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()

    expect_equal(output[2], 0, tolerance = 1e-5)
    assert not (any(is_na(output)))
    assert not (any(is_infinite(output)))


def test_gelu_and_gelu_quick_produce_similar_results():
    """gelu and gelu_quick produce similar results"""
    ctx = ggml_init(16 * 1024 * 1024)

    a1 = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    a2 = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    ggml_set_f32(a1, c(-1, -0.5, 0, 0.5, 1))
    ggml_set_f32(a2, c(-1, -0.5, 0, 0.5, 1))

    r1 = ggml_gelu(ctx, a1)
    r2 = ggml_gelu_quick(ctx, a2)

    graph1 = ggml_build_forward_expand(ctx, r1)
    ggml_graph_compute(ctx, graph1)
    out1 = ggml_get_f32(r1).ravel()

    graph2 = ggml_build_forward_expand(ctx, r2)
    ggml_graph_compute(ctx, graph2)
    out2 = ggml_get_f32(r2).ravel()

    expect_equal(out1, out2, tolerance = 0.05)

