"""Port of ggmlR's tests/testthat/test-tensor-utils.R (ggmlR 0.8.2)."""
import numpy as np  # noqa: F401
import pytest  # noqa: F401

from ggmlpy import *  # noqa: F401,F403
from ggmlpy import GGMLError  # noqa: F401

from .rlike import *  # noqa: F401,F403


def test_ggml_tensor_nb_returns_stride_info():
    """ggml_tensor_nb returns stride info"""
    ctx = ggml_init(1024 * 1024)

    t = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 4, 3)
    nb = ggml_tensor_nb(t)
    expect_type(nb, "double")
    assert length(nb) == 5  # GGML_MAX_DIMS=5 strides (ggmlpy: the fifth is nb3 * ne3, as ggml lays out a fifth dim)
    assert GGML_MAX_DIMS == 5
    expect_equal(nb[0], 4)
    expect_equal(nb[1], 16)


def test_ggml_tensor_num_counts_tensors_in_context():
    """ggml_tensor_num counts tensors in context"""
    ctx = ggml_init(1024 * 1024)

    expect_equal(ggml_tensor_num(ctx), 0)

    ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    expect_equal(ggml_tensor_num(ctx), 1)

    ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 8)
    expect_equal(ggml_tensor_num(ctx), 2)


def test_ggml_tensor_copy_copies_data_between_tensors():
    """ggml_tensor_copy copies data between tensors"""
    ctx = ggml_init(1024 * 1024)

    src = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    dst = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    ggml_set_f32(src, c(1, 2, 3, 4))
    ggml_set_f32(dst, c(0, 0, 0, 0))

    ggml_tensor_copy(dst, src)
    result = ggml_get_f32(dst).ravel()
    expect_equal(result, c(1, 2, 3, 4), tolerance = 1e-6)


def test_ggml_tensor_set_f32_scalar_sets_all_elements():
    """ggml_tensor_set_f32_scalar sets all elements"""
    ctx = ggml_init(1024 * 1024)

    t = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    ggml_tensor_set_f32_scalar(t, 42.0)
    result = ggml_get_f32(t).ravel()
    expect_equal(result, rep(42.0, 4), tolerance = 1e-6)


def test_ggml_get_f32_nd_and_ggml_set_f32_nd_work_for_2d():
    """ggml_get_f32_nd and ggml_set_f32_nd work for 2D"""
    ctx = ggml_init(1024 * 1024)

    t = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 3, 2)
    ggml_set_f32(t, c(1, 2, 3, 4, 5, 6))

    expect_equal(ggml_get_f32_nd(t, 0, 0), 1.0, tolerance = 1e-6)
    expect_equal(ggml_get_f32_nd(t, 2, 1), 6.0, tolerance = 1e-6)

    ggml_set_f32_nd(t, 1, 0, value = 99.0)
    expect_equal(ggml_get_f32_nd(t, 1, 0), 99.0, tolerance = 1e-6)


def test_ggml_get_i32_nd_and_ggml_set_i32_nd_work():
    """ggml_get_i32_nd and ggml_set_i32_nd work"""
    ctx = ggml_init(1024 * 1024)

    t = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, 4)
    ggml_set_i32(t, c(10, 20, 30, 40))

    expect_equal(ggml_get_i32_nd(t, 0), 10)
    expect_equal(ggml_get_i32_nd(t, 3), 40)

    ggml_set_i32_nd(t, 1, value = 99)
    expect_equal(ggml_get_i32_nd(t, 1), 99)


def test_ggml_get_first_tensor_and_ggml_get_next_tensor_iterate():
    """ggml_get_first_tensor and ggml_get_next_tensor iterate"""
    ctx = ggml_init(1024 * 1024)

    t1 = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    ggml_set_name(t1, "first")
    t2 = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 8)
    ggml_set_name(t2, "second")

    first = ggml_get_first_tensor(ctx)
    expect_type(first, "externalptr")
    expect_equal(ggml_get_name(first), "first")

    second = ggml_get_next_tensor(ctx, first)
    expect_type(second, "externalptr")
    expect_equal(ggml_get_name(second), "second")


def test_ggml_backend_tensor_get_f32_first_returns_first_element():
    """ggml_backend_tensor_get_f32_first returns first element"""
    ctx = ggml_init(1024 * 1024)

    t = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    ggml_set_f32(t, c(3.14, 2.0, 1.0, 0.5))

    val = ggml_backend_tensor_get_f32_first(t)
    expect_equal(val, 3.14, tolerance = 1e-5)

