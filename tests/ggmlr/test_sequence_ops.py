"""Port of ggmlR's tests/testthat/test-sequence-ops.R (ggmlR 0.8.2)."""
import numpy as np  # noqa: F401
import pytest  # noqa: F401

from ggmlpy import *  # noqa: F401,F403
from ggmlpy import GGMLError  # noqa: F401

from .rlike import *  # noqa: F401,F403


def test_ggml_pad_works_correctly_for_1d():
    """ggml_pad works correctly for 1D"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 3)
    ggml_set_f32(a, c(1, 2, 3))
    b = ggml_pad(ctx, a, 2)
    expect_equal(ggml_tensor_shape(b)[0], 5)

    graph = ggml_build_forward_expand(ctx, b)
    ggml_graph_compute(ctx, graph)
    result = ggml_get_f32(b).ravel()
    expect_equal(result, c(1, 2, 3, 0, 0))


def test_ggml_pad_works_for_2d_tensors():
    """ggml_pad works for 2D tensors"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 2, 2)
    ggml_set_f32(a, c(1, 2, 3, 4))
    b = ggml_pad(ctx, a, 1, 1)

    shape = ggml_tensor_shape(b)
    expect_equal(shape[0], 3)
    expect_equal(shape[1], 3)


def test_ggml_argsort_ascending_works():
    """ggml_argsort ascending works"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    ggml_set_f32(a, c(3, 1, 4, 1, 5))

    indices = ggml_argsort(ctx, a, GGML_SORT_ORDER_ASC)
    graph = ggml_build_forward_expand(ctx, indices)
    ggml_graph_compute(ctx, graph)

    result = ggml_get_i32(indices)
    expect_equal(result[0], 1)
    expect_equal(result[4], 4)


def test_ggml_argsort_descending_works():
    """ggml_argsort descending works"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    ggml_set_f32(a, c(10, 30, 20, 40))

    indices = ggml_argsort(ctx, a, GGML_SORT_ORDER_DESC)
    graph = ggml_build_forward_expand(ctx, indices)
    ggml_graph_compute(ctx, graph)

    result = ggml_get_i32(indices)
    expect_equal(result[0], 3)
    expect_equal(result[3], 0)


def test_ggml_top_k_returns_correct_indices():
    """ggml_top_k returns correct indices"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 6)
    ggml_set_f32(a, c(1, 6, 2, 5, 3, 4))

    top3 = ggml_top_k(ctx, a, 3)
    graph = ggml_build_forward_expand(ctx, top3)
    ggml_graph_compute(ctx, graph)

    result = sort(ggml_get_i32(top3))
    expect_equal(result, c(1, 3, 5))


def test_sort_order_constants_are_defined():
    """sort order constants are defined"""
    expect_equal(GGML_SORT_ORDER_ASC, 0)
    expect_equal(GGML_SORT_ORDER_DESC, 1)

