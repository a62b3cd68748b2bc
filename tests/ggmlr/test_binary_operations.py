"""Port of ggmlR's tests/testthat/test-binary-operations.R (ggmlR 0.8.2)."""
import numpy as np  # noqa: F401
import pytest  # noqa: F401

from ggmlpy import *  # noqa: F401,F403
from ggmlpy import GGMLError  # noqa: F401

from .rlike import *  # noqa: F401,F403


def test_ggml_sub_subtracts_element_wise():
    """ggml_sub subtracts element-wise"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    b = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    ggml_set_f32(a, c(10, 20, 30, 40, 50))
    ggml_set_f32(b, c(1, 2, 3, 4, 5))

    result = ggml_sub(ctx, a, b)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    expect_equal(output, c(9, 18, 27, 36, 45), tolerance = 1e-5)


def test_ggml_sub_with_negative_result():
    """ggml_sub with negative result"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    b = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    ggml_set_f32(a, c(1, 2, 3, 4))
    ggml_set_f32(b, c(5, 5, 5, 5))

    result = ggml_sub(ctx, a, b)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    expect_equal(output, c(-4, -3, -2, -1), tolerance = 1e-5)


def test_ggml_sub_a_a_0():
    """ggml_sub a - a = 0"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    ggml_set_f32(a, c(1, 2, 3, 4, 5))

    result = ggml_sub(ctx, a, a)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    expect_equal(output, rep(0, 5), tolerance = 1e-5)


def test_ggml_sub_on_2d_tensors():
    """ggml_sub on 2D tensors"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 3, 2)
    b = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 3, 2)
    ggml_set_f32(a, c(10, 20, 30, 40, 50, 60))
    ggml_set_f32(b, c(1, 2, 3, 4, 5, 6))

    result = ggml_sub(ctx, a, b)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    expect_equal(output, c(9, 18, 27, 36, 45, 54), tolerance = 1e-5)


def test_ggml_div_divides_element_wise():
    """ggml_div divides element-wise"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    b = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    ggml_set_f32(a, c(10, 20, 30, 40, 50))
    ggml_set_f32(b, c(2, 4, 5, 8, 10))

    result = ggml_div(ctx, a, b)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    expect_equal(output, c(5, 5, 6, 5, 5), tolerance = 1e-5)


def test_ggml_div_a_a_1():
    """ggml_div a / a = 1"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    ggml_set_f32(a, c(1, 2, 3, 4, 5))

    result = ggml_div(ctx, a, a)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    expect_equal(output, rep(1, 5), tolerance = 1e-5)


def test_ggml_div_with_fractional_results():
    """ggml_div with fractional results"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    b = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    ggml_set_f32(a, c(1, 1, 1, 1))
    ggml_set_f32(b, c(2, 3, 4, 5))

    result = ggml_div(ctx, a, b)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    expect_equal(output, c(0.5, 1/3, 0.25, 0.2), tolerance = 1e-5)


def test_ggml_div_on_2d_tensors():
    """ggml_div on 2D tensors"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 2, 3)
    b = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 2, 3)
    ggml_set_f32(a, c(2, 4, 6, 8, 10, 12))
    ggml_set_f32(b, c(1, 2, 2, 4, 5, 6))

    result = ggml_div(ctx, a, b)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    expect_equal(output, c(2, 2, 3, 2, 2, 2), tolerance = 1e-5)


def test_a_b_b_a():
    """(a + b) - b = a"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    b = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    ggml_set_f32(a, c(1, 2, 3, 4, 5))
    ggml_set_f32(b, c(10, 20, 30, 40, 50))

    sum_ab = ggml_add(ctx, a, b)
    result = ggml_sub(ctx, sum_ab, b)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    expect_equal(output, c(1, 2, 3, 4, 5), tolerance = 1e-5)


def test_a_b_b_a_2():
    """(a * b) / b = a"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    b = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    ggml_set_f32(a, c(1, 2, 3, 4, 5))
    ggml_set_f32(b, c(2, 3, 4, 5, 6))

    prod_ab = ggml_mul(ctx, a, b)
    result = ggml_div(ctx, prod_ab, b)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    expect_equal(output, c(1, 2, 3, 4, 5), tolerance = 1e-4)


def test_a_b_b_a_3():
    """a / b * b = a"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    b = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    ggml_set_f32(a, c(10, 20, 30, 40, 50))
    ggml_set_f32(b, c(2, 4, 5, 8, 10))

    div_ab = ggml_div(ctx, a, b)
    result = ggml_mul(ctx, div_ab, b)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    expect_equal(output, c(10, 20, 30, 40, 50), tolerance = 1e-4)


def test_ggml_add1_adds_scalar_to_tensor():
    """ggml_add1 adds scalar to tensor"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    scalar = ggml_new_f32(ctx, 10)
    ggml_set_f32(a, c(1, 2, 3, 4, 5))

    result = ggml_add1(ctx, a, scalar)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    expect_equal(output, c(11, 12, 13, 14, 15), tolerance = 1e-5)


def test_ggml_scale_multiplies_by_scalar():
    """ggml_scale multiplies by scalar"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    ggml_set_f32(a, c(1, 2, 3, 4, 5))

    result = ggml_scale(ctx, a, 3)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    expect_equal(output, c(3, 6, 9, 12, 15), tolerance = 1e-5)

