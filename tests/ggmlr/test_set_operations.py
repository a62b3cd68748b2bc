"""Port of ggmlR's tests/testthat/test-set-operations.R (ggmlR 0.8.2)."""
import numpy as np  # noqa: F401
import pytest  # noqa: F401

from ggmlpy import *  # noqa: F401,F403
from ggmlpy import GGMLError  # noqa: F401

from .rlike import *  # noqa: F401,F403


def test_ggml_set_1d_copies_tensor_at_offset():
    """ggml_set_1d copies tensor at offset"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 10)
    ggml_set_f32(a, rep(0, 10))

    b = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 3)
    ggml_set_f32(b, c(1, 2, 3))

    result = ggml_set_1d(ctx, a, b, offset = 2 * 4)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    expected = c(0, 0, 1, 2, 3, 0, 0, 0, 0, 0)
    expect_equal(output, expected, tolerance = 1e-5)


def test_ggml_set_1d_at_beginning():
    """ggml_set_1d at beginning"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    ggml_set_f32(a, rep(0, 5))

    b = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 2)
    ggml_set_f32(b, c(7, 8))

    result = ggml_set_1d(ctx, a, b, offset = 0)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    expect_equal(output, c(7, 8, 0, 0, 0), tolerance = 1e-5)


def test_ggml_set_2d_copies_tensor_with_stride():
    """ggml_set_2d copies tensor with stride"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 4, 3)
    ggml_set_f32(a, rep(0, 12))

    b = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 2, 2)
    ggml_set_f32(b, c(1, 2, 3, 4))

    result = ggml_set_2d(ctx, a, b, nb1 = 4 * 4, offset = 0)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    assert length(output) == 12


def test_ggml_set_copies_tensor_with_full_control():
    """ggml_set copies tensor with full control"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 4, 4)
    ggml_set_f32(a, rep(0, 16))

    b = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 2, 2)
    ggml_set_f32(b, c(1, 2, 3, 4))

    result = ggml_set(ctx, a, b, nb1 = 4 * 4, nb2 = 16 * 4, nb3 = 64 * 4, offset = 0)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    assert length(output) == 16
    assert not (any(is_na(output)))


def test_ggml_set_zero_zeros_all_elements():
    """ggml_set_zero zeros all elements"""
    ctx = ggml_init(16 * 1024 * 1024)

    t = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 10)
    ggml_set_f32(t, as_numeric(rng(1, 10)))

    assert any(ggml_get_f32(t).ravel() != 0)

    ggml_set_zero(t)

    output = ggml_get_f32(t).ravel()
    expect_equal(output, rep(0, 10), tolerance = 1e-10)


def test_ggml_set_zero_on_2d_tensor():
    """ggml_set_zero on 2D tensor"""
    ctx = ggml_init(16 * 1024 * 1024)

    t = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 4, 5)
    ggml_set_f32(t, rnorm(20))

    ggml_set_zero(t)

    output = ggml_get_f32(t).ravel()
    expect_equal(output, rep(0, 20), tolerance = 1e-10)


def test_ggml_set_f32_and_ggml_get_f32_roundtrip():
    """ggml_set_f32 and ggml_get_f32 roundtrip"""
    ctx = ggml_init(16 * 1024 * 1024)

    t = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    data = c(1.1, 2.2, 3.3, 4.4, 5.5)

    ggml_set_f32(t, data)
    output = ggml_get_f32(t).ravel()

    expect_equal(output, data, tolerance = 1e-6)


def test_ggml_set_f32_handles_negative_values():
    """ggml_set_f32 handles negative values"""
    ctx = ggml_init(16 * 1024 * 1024)

    t = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    data = c(-10.5, -0.001, 0.001, 10.5)

    ggml_set_f32(t, data)
    output = ggml_get_f32(t).ravel()

    expect_equal(output, data, tolerance = 1e-6)


def test_ggml_set_i32_and_ggml_get_i32_roundtrip():
    """ggml_set_i32 and ggml_get_i32 roundtrip"""
    ctx = ggml_init(16 * 1024 * 1024)

    t = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, 5)
    data = c(1, 2, 3, 4, 5)

    ggml_set_i32(t, data)
    output = ggml_get_i32(t)

    expect_equal(output, data)


def test_ggml_set_i32_handles_negative_values():
    """ggml_set_i32 handles negative values"""
    ctx = ggml_init(16 * 1024 * 1024)

    t = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, 4)
    data = c(-100, -1, 0, 100)

    ggml_set_i32(t, data)
    output = ggml_get_i32(t)

    expect_equal(output, data)


def test_ggml_new_i32_creates_scalar_integer_tensor():
    """ggml_new_i32 creates scalar integer tensor"""
    ctx = ggml_init(1024 * 1024)

    scalar = ggml_new_i32(ctx, 42)

    expect_equal(ggml_nelements(scalar), 1)
    expect_equal(ggml_tensor_type(scalar), GGML_TYPE_I32)
    expect_equal(ggml_get_i32(scalar), 42)


def test_ggml_new_f32_creates_scalar_float_tensor():
    """ggml_new_f32 creates scalar float tensor"""
    ctx = ggml_init(1024 * 1024)

    scalar = ggml_new_f32(ctx, 3.14159)

    expect_equal(ggml_nelements(scalar), 1)
    expect_equal(ggml_tensor_type(scalar), GGML_TYPE_F32)
    expect_equal(ggml_get_f32(scalar).ravel(), 3.14159, tolerance = 1e-5)


def test_ggml_new_i32_with_negative_value():
    """ggml_new_i32 with negative value"""
    ctx = ggml_init(1024 * 1024)

    scalar = ggml_new_i32(ctx, -999)

    expect_equal(ggml_get_i32(scalar), -999)


def test_ggml_new_f32_with_zero():
    """ggml_new_f32 with zero"""
    ctx = ggml_init(1024 * 1024)

    scalar = ggml_new_f32(ctx, 0)

    expect_equal(ggml_get_f32(scalar).ravel(), 0, tolerance = 1e-10)

