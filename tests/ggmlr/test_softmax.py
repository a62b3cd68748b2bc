"""Port of ggmlR's tests/testthat/test-softmax.R (ggmlR 0.8.2)."""
import numpy as np  # noqa: F401
import pytest  # noqa: F401

from ggmlpy import *  # noqa: F401,F403
from ggmlpy import GGMLError  # noqa: F401

from .rlike import *  # noqa: F401,F403


def test_ggml_soft_max_computes_softmax_correctly():
    """ggml_soft_max computes softmax correctly"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    ggml_set_f32(a, c(1, 2, 3, 4, 5))

    result = ggml_soft_max(ctx, a)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()

    assert all(output > 0)
    assert all(output < 1)
    expect_equal(sum(output), 1, tolerance = 1e-5)


def test_ggml_soft_max_outputs_sum_to_1():
    """ggml_soft_max outputs sum to 1"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 100)
    ggml_set_f32(a, rnorm(100))

    result = ggml_soft_max(ctx, a)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    expect_equal(sum(output), 1, tolerance = 1e-5)


def test_ggml_soft_max_preserves_order():
    """ggml_soft_max preserves order"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    ggml_set_f32(a, c(1, 2, 3, 4, 5))

    result = ggml_soft_max(ctx, a)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()

    assert all(diff(output) > 0)


def test_ggml_soft_max_with_uniform_input_gives_uniform_output():
    """ggml_soft_max with uniform input gives uniform output"""
    ctx = ggml_init(16 * 1024 * 1024)

    n = 5
    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, n)
    ggml_set_f32(a, rep(1, n))

    result = ggml_soft_max(ctx, a)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()

    expect_equal(output, rep(1/n, n), tolerance = 1e-5)


def test_ggml_soft_max_handles_negative_inputs():
    """ggml_soft_max handles negative inputs"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    ggml_set_f32(a, c(-5, -3, -1, 0, 1))

    result = ggml_soft_max(ctx, a)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()

    assert all(output > 0)
    expect_equal(sum(output), 1, tolerance = 1e-5)


def test_ggml_soft_max_inplace_computes_in_place():
    """ggml_soft_max_inplace computes in-place"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    ggml_set_f32(a, c(1, 2, 3, 4, 5))

    result = ggml_soft_max_inplace(ctx, a)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()

    assert all(output > 0)
    expect_equal(sum(output), 1, tolerance = 1e-5)


def test_ggml_soft_max_ext_with_scale_1_matches_basic_softmax():
    """ggml_soft_max_ext with scale=1 matches basic softmax"""
    ctx = ggml_init(16 * 1024 * 1024)

    a1 = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    a2 = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    ggml_set_f32(a1, c(1, 2, 3, 4, 5))
    ggml_set_f32(a2, c(1, 2, 3, 4, 5))

    r1 = ggml_soft_max(ctx, a1)
    r2 = ggml_soft_max_ext(ctx, a2, mask = None, scale = 1.0, max_bias = 0.0)

    g1 = ggml_build_forward_expand(ctx, r1)
    ggml_graph_compute(ctx, g1)
    out1 = ggml_get_f32(r1).ravel()

    g2 = ggml_build_forward_expand(ctx, r2)
    ggml_graph_compute(ctx, g2)
    out2 = ggml_get_f32(r2).ravel()

    expect_equal(out1, out2, tolerance = 1e-5)


def test_ggml_soft_max_ext_with_scale_1_produces_flatter_distribution():
    """ggml_soft_max_ext with scale < 1 produces flatter distribution"""
    ctx = ggml_init(16 * 1024 * 1024)

    a1 = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    a2 = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    ggml_set_f32(a1, c(1, 2, 3, 4, 5))
    ggml_set_f32(a2, c(1, 2, 3, 4, 5))

    r1 = ggml_soft_max_ext(ctx, a1, scale = 1.0)
    r2 = ggml_soft_max_ext(ctx, a2, scale = 0.5)

    g1 = ggml_build_forward_expand(ctx, r1)
    ggml_graph_compute(ctx, g1)
    out1 = ggml_get_f32(r1).ravel()

    g2 = ggml_build_forward_expand(ctx, r2)
    ggml_graph_compute(ctx, g2)
    out2 = ggml_get_f32(r2).ravel()

    assert max(out2) < max(out1)


def test_ggml_soft_max_ext_with_scale_1_produces_sharper_distribution():
    """ggml_soft_max_ext with scale > 1 produces sharper distribution"""
    ctx = ggml_init(16 * 1024 * 1024)

    a1 = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    a2 = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    ggml_set_f32(a1, c(1, 2, 3, 4, 5))
    ggml_set_f32(a2, c(1, 2, 3, 4, 5))

    r1 = ggml_soft_max_ext(ctx, a1, scale = 1.0)
    r2 = ggml_soft_max_ext(ctx, a2, scale = 2.0)

    g1 = ggml_build_forward_expand(ctx, r1)
    ggml_graph_compute(ctx, g1)
    out1 = ggml_get_f32(r1).ravel()

    g2 = ggml_build_forward_expand(ctx, r2)
    ggml_graph_compute(ctx, g2)
    out2 = ggml_get_f32(r2).ravel()

    assert max(out2) > max(out1)


def test_ggml_soft_max_on_2d_tensor():
    """ggml_soft_max on 2D tensor"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 4, 3)
    ggml_set_f32(a, as_numeric(rng(1, 12)))

    result = ggml_soft_max(ctx, a)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()

    assert all(output > 0)
    assert all(output < 1)


def test_ggml_soft_max_handles_large_values():
    """ggml_soft_max handles large values"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    ggml_set_f32(a, c(100, 200, 300, 400, 500))

    result = ggml_soft_max(ctx, a)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()

    assert not (any(is_na(output)))
    assert not (any(is_infinite(output)))
    expect_equal(sum(output), 1, tolerance = 1e-4)


def test_ggml_soft_max_handles_very_negative_values():
    """ggml_soft_max handles very negative values"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    ggml_set_f32(a, c(-500, -400, -300, -200, -100))

    result = ggml_soft_max(ctx, a)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()

    assert not (any(is_na(output)))
    expect_equal(sum(output), 1, tolerance = 1e-4)

