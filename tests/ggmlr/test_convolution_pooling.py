"""Port of ggmlR's tests/testthat/test-convolution-pooling.R (ggmlR 0.8.2)."""
import numpy as np  # noqa: F401
import pytest  # noqa: F401

from ggmlpy import *  # noqa: F401,F403
from ggmlpy import GGMLError  # noqa: F401

from .rlike import *  # noqa: F401,F403


def test_ggml_conv_1d_creates_convolution_operation():
    """ggml_conv_1d creates convolution operation"""
    ctx = ggml_init(16 * 1024 * 1024)

    kernel = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 3, 1)
    input = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 10, 1)

    ggml_set_f32(kernel, c(1, 1, 1))
    ggml_set_f32(input, as_numeric(rng(1, 10)))

    result = ggml_conv_1d(ctx, kernel, input, s0 = 1, p0 = 0, d0 = 1)

    expect_type(result, "externalptr")
    assert not ((result is None))


def test_ggml_conv_1d_with_stride():
    """ggml_conv_1d with stride"""
    ctx = ggml_init(16 * 1024 * 1024)

    kernel = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 3, 1)
    input = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 10, 1)

    ggml_set_f32(kernel, c(1, 1, 1))
    ggml_set_f32(input, as_numeric(rng(1, 10)))

    result = ggml_conv_1d(ctx, kernel, input, s0 = 2, p0 = 0, d0 = 1)

    expect_type(result, "externalptr")


def test_ggml_conv_1d_with_padding():
    """ggml_conv_1d with padding"""
    ctx = ggml_init(16 * 1024 * 1024)

    kernel = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 3, 1)
    input = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 10, 1)

    ggml_set_f32(kernel, c(1, 1, 1))
    ggml_set_f32(input, as_numeric(rng(1, 10)))

    result = ggml_conv_1d(ctx, kernel, input, s0 = 1, p0 = 1, d0 = 1)

    expect_type(result, "externalptr")


def test_ggml_conv_2d_creates_2d_convolution_operation():
    """ggml_conv_2d creates 2D convolution operation"""
    ctx = ggml_init(32 * 1024 * 1024)

    kernel = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, 3, 3, 1, 1)
    input = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, 8, 8, 1, 1)

    ggml_set_f32(kernel, rep(1/9, 9))
    ggml_set_f32(input, rnorm(64))

    result = ggml_conv_2d(ctx, kernel, input)

    expect_type(result, "externalptr")
    assert not ((result is None))


def test_ggml_conv_2d_with_stride_and_padding():
    """ggml_conv_2d with stride and padding"""
    ctx = ggml_init(32 * 1024 * 1024)

    kernel = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, 3, 3, 1, 1)
    input = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, 8, 8, 1, 1)

    ggml_set_f32(kernel, rep(1/9, 9))
    ggml_set_f32(input, rnorm(64))

    result = ggml_conv_2d(ctx, kernel, input, s0 = 2, s1 = 2, p0 = 1, p1 = 1)

    expect_type(result, "externalptr")


def test_ggml_conv_transpose_1d_creates_deconvolution_operation():
    """ggml_conv_transpose_1d creates deconvolution operation"""
    ctx = ggml_init(16 * 1024 * 1024)

    kernel = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 3, 1)
    input = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 5, 1)

    ggml_set_f32(kernel, c(1, 2, 1))
    ggml_set_f32(input, as_numeric(rng(1, 5)))

    result = ggml_conv_transpose_1d(ctx, kernel, input)

    expect_type(result, "externalptr")
    assert not ((result is None))


def test_ggml_pool_1d_max_pooling_works():
    """ggml_pool_1d max pooling works"""
    ctx = ggml_init(16 * 1024 * 1024)

    input = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 8)
    ggml_set_f32(input, c(1, 3, 2, 4, 5, 2, 8, 1))

    result = ggml_pool_1d(ctx, input, GGML_OP_POOL_MAX, k0 = 2, s0 = 2, p0 = 0)

    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    expect_equal(output, c(3, 4, 5, 8), tolerance = 1e-5)


def test_ggml_pool_1d_average_pooling_works():
    """ggml_pool_1d average pooling works"""
    ctx = ggml_init(16 * 1024 * 1024)

    input = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 8)
    ggml_set_f32(input, c(2, 4, 6, 8, 10, 12, 14, 16))

    result = ggml_pool_1d(ctx, input, GGML_OP_POOL_AVG, k0 = 2, s0 = 2, p0 = 0)

    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    expect_equal(output, c(3, 7, 11, 15), tolerance = 1e-5)


def test_ggml_pool_1d_with_overlapping_windows():
    """ggml_pool_1d with overlapping windows

    ggmlR skips this block ("requires specific tensor layout"); ggmlpy's pool_1d handles stride < kernel
    on a plain 1-D tensor, so the port tests it against numpy."""
    ctx = ggml_init(16 * 1024 * 1024)
    x = c(1, 5, 2, 8, 3, 7)
    input = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 6)
    ggml_set_f32(input, x)
    mx = ggml_pool_1d(ctx, input, GGML_OP_POOL_MAX, k0 = 3, s0 = 1, p0 = 0)
    av = ggml_pool_1d(ctx, input, GGML_OP_POOL_AVG, k0 = 3, s0 = 1, p0 = 0)
    graph = ggml_build_forward_expand(ctx, mx)
    ggml_build_forward_expand(graph, av)
    ggml_graph_compute(ctx, graph)
    win = np.lib.stride_tricks.sliding_window_view(x, 3)
    expect_equal(ggml_get_f32(mx).ravel(), win.max(axis=1), tolerance = 1e-6)
    expect_equal(ggml_get_f32(av).ravel(), win.mean(axis=1), tolerance = 1e-6)
    ggml_free(ctx)


def test_ggml_pool_2d_max_pooling_works():
    """ggml_pool_2d max pooling works"""
    ctx = ggml_init(16 * 1024 * 1024)

    input = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 4, 4)
    ggml_set_f32(input, c(
      1, 2, 3, 4,
      5, 6, 7, 8,
      9, 10, 11, 12,
      13, 14, 15, 16
    ))

    result = ggml_pool_2d(ctx, input, GGML_OP_POOL_MAX, k0 = 2, k1 = 2, s0 = 2, s1 = 2)

    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    assert length(output) == 4


def test_ggml_pool_2d_average_pooling_works():
    """ggml_pool_2d average pooling works"""
    ctx = ggml_init(16 * 1024 * 1024)

    input = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 4, 4)
    ggml_set_f32(input, rep(4, 16))

    result = ggml_pool_2d(ctx, input, GGML_OP_POOL_AVG, k0 = 2, k1 = 2, s0 = 2, s1 = 2)

    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    expect_equal(output, rep(4, 4), tolerance = 1e-5)


def test_ggml_im2col_creates_im2col_operation():
    """ggml_im2col creates im2col operation"""
    ctx = ggml_init(32 * 1024 * 1024)

    kernel = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, 3, 3, 1, 1)
    input = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, 8, 8, 1, 1)

    ggml_set_f32(kernel, rep(1, 9))
    ggml_set_f32(input, rnorm(64))

    result = ggml_im2col(ctx, kernel, input, s0 = 1, s1 = 1, p0 = 0, p1 = 0, d0 = 1, d1 = 1)

    expect_type(result, "externalptr")
    assert not ((result is None))


def test_pooling_constants_are_defined_correctly():
    """pooling constants are defined correctly"""
    expect_equal(GGML_OP_POOL_MAX, 0)
    expect_equal(GGML_OP_POOL_AVG, 1)

