"""Port of ggmlR's tests/testthat/test-reduction-ops.R (ggmlR 0.8.2)."""
import numpy as np  # noqa: F401
import pytest  # noqa: F401

from ggmlpy import *  # noqa: F401,F403
from ggmlpy import GGMLError  # noqa: F401

from .rlike import *  # noqa: F401,F403


def test_ggml_sum_computes_total_sum():
    """ggml_sum computes total sum"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    ggml_set_f32(a, c(1, 2, 3, 4, 5))

    result = ggml_sum(ctx, a)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    expect_equal(output, 15, tolerance = 1e-5)


def test_ggml_sum_on_2d_tensor():
    """ggml_sum on 2D tensor"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 3, 4)
    ggml_set_f32(a, as_numeric(rng(1, 12)))

    result = ggml_sum(ctx, a)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    expect_equal(output, sum(rng(1, 12)), tolerance = 1e-5)


def test_ggml_sum_of_zeros():
    """ggml_sum of zeros"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 10)
    ggml_set_f32(a, rep(0, 10))

    result = ggml_sum(ctx, a)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    expect_equal(output, 0, tolerance = 1e-5)


def test_ggml_sum_handles_negative_numbers():
    """ggml_sum handles negative numbers"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    ggml_set_f32(a, c(-5, -3, 3, 5))

    result = ggml_sum(ctx, a)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    expect_equal(output, 0, tolerance = 1e-5)


def test_ggml_sum_rows_computes_row_sums():
    """ggml_sum_rows computes row sums"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 3, 2)
    ggml_set_f32(a, c(1, 2, 3, 4, 5, 6))

    result = ggml_sum_rows(ctx, a)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    assert length(output) == 2
    expect_equal(output, c(6, 15), tolerance = 1e-5)


def test_ggml_mean_computes_average():
    """ggml_mean computes average"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    ggml_set_f32(a, c(2, 4, 6, 8, 10))

    result = ggml_mean(ctx, a)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    expect_equal(output, 6, tolerance = 1e-5)


def test_ggml_mean_on_2d_tensor_computes_row_wise_mean():
    """ggml_mean on 2D tensor computes row-wise mean"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 4, 3)
    ggml_set_f32(a, as_numeric(rng(1, 12)))

    result = ggml_mean(ctx, a)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    expect_equal(output, c(2.5, 6.5, 10.5), tolerance = 1e-5)


def test_ggml_mean_of_constant_tensor():
    """ggml_mean of constant tensor"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 100)
    ggml_set_f32(a, rep(7.5, 100))

    result = ggml_mean(ctx, a)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    expect_equal(output, 7.5, tolerance = 1e-5)


def test_ggml_argmax_finds_index_of_maximum():
    """ggml_argmax finds index of maximum"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    ggml_set_f32(a, c(1, 5, 3, 2, 4))

    result = ggml_argmax(ctx, a)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_i32(result)
    expect_equal(output, 1)


def test_ggml_argmax_with_first_element_max():
    """ggml_argmax with first element max"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    ggml_set_f32(a, c(10, 5, 3, 1))

    result = ggml_argmax(ctx, a)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_i32(result)
    expect_equal(output, 0)


def test_ggml_argmax_with_last_element_max():
    """ggml_argmax with last element max"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    ggml_set_f32(a, c(1, 3, 5, 10))

    result = ggml_argmax(ctx, a)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_i32(result)
    expect_equal(output, 3)


def test_ggml_argmax_handles_negative_values():
    """ggml_argmax handles negative values"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    ggml_set_f32(a, c(-10, -5, -1, -3))

    result = ggml_argmax(ctx, a)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_i32(result)
    expect_equal(output, 2)


def test_sum_and_mean_are_consistent():
    """sum and mean are consistent"""
    ctx = ggml_init(16 * 1024 * 1024)

    n = 10
    a1 = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, n)
    a2 = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, n)
    data = rnorm(n)
    ggml_set_f32(a1, data)
    ggml_set_f32(a2, data)

    sum_result = ggml_sum(ctx, a1)
    mean_result = ggml_mean(ctx, a2)

    graph1 = ggml_build_forward_expand(ctx, sum_result)
    ggml_graph_compute(ctx, graph1)
    sum_val = ggml_get_f32(sum_result).ravel()

    graph2 = ggml_build_forward_expand(ctx, mean_result)
    ggml_graph_compute(ctx, graph2)
    mean_val = ggml_get_f32(mean_result).ravel()

    expect_equal(sum_val / n, mean_val, tolerance = 1e-4)


def test_ggml_repeat_replicates_tensor():
    """ggml_repeat replicates tensor"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 1, 2)
    ggml_set_f32(a, c(1, 2))

    b = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 3, 2)

    result = ggml_repeat(ctx, a, b)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    assert length(output) == 6
    expect_equal(output, c(1, 1, 1, 2, 2, 2), tolerance = 1e-5)

