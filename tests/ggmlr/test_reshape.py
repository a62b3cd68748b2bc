"""Port of ggmlR's tests/testthat/test-reshape.R (ggmlR 0.8.2)."""
import numpy as np  # noqa: F401
import pytest  # noqa: F401

from ggmlpy import *  # noqa: F401,F403
from ggmlpy import GGMLError  # noqa: F401

from .rlike import *  # noqa: F401,F403


def test_reshape_1d_works():
    """reshape_1d works"""
    ctx = ggml_init(4 * 1024 * 1024)

    t2d = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 10, 10)
    t1d = ggml_reshape_1d(ctx, t2d, 100)

    expect_equal(ggml_nelements(t1d), 100)
    expect_equal(ggml_n_dims(t1d), 1)

    ggml_free(ctx)


def test_reshape_2d_works():
    """reshape_2d works"""
    ctx = ggml_init(4 * 1024 * 1024)

    t1d = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 100)
    t2d = ggml_reshape_2d(ctx, t1d, 10, 10)

    expect_equal(ggml_nelements(t2d), 100)
    shape = ggml_tensor_shape(t2d)
    expect_equal(shape[0], 10)
    expect_equal(shape[1], 10)

    ggml_free(ctx)


def test_reshape_3d_works():
    """reshape_3d works"""
    ctx = ggml_init(4 * 1024 * 1024)

    t1d = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 120)
    t3d = ggml_reshape_3d(ctx, t1d, 4, 5, 6)

    expect_equal(ggml_nelements(t3d), 120)
    shape = ggml_tensor_shape(t3d)
    expect_equal(shape[0], 4)
    expect_equal(shape[1], 5)
    expect_equal(shape[2], 6)

    ggml_free(ctx)


def test_reshape_4d_works():
    """reshape_4d works"""
    ctx = ggml_init(4 * 1024 * 1024)

    t1d = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 120)
    t4d = ggml_reshape_4d(ctx, t1d, 2, 3, 4, 5)

    expect_equal(ggml_nelements(t4d), 120)
    shape = ggml_tensor_shape(t4d)
    expect_equal(shape[0], 2)
    expect_equal(shape[1], 3)
    expect_equal(shape[2], 4)
    expect_equal(shape[3], 5)

    ggml_free(ctx)


def test_view_tensor_creates_view_sharing_data():
    """view_tensor creates view sharing data"""
    ctx = ggml_init(4 * 1024 * 1024)

    original = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 10)
    ggml_set_f32(original, rng(1, 10))

    view = ggml_view_tensor(ctx, original)

    expect_type(view, "externalptr")
    expect_equal(ggml_nelements(view), 10)
    expect_equal(ggml_get_f32(view).ravel(), rng(1, 10))

    ggml_free(ctx)


def test_permute_changes_tensor_dimensions():
    """permute changes tensor dimensions"""
    ctx = ggml_init(16 * 1024 * 1024)

    t2d = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 3, 4)
    t_perm = ggml_permute(ctx, t2d, 1, 0, 2, 3)

    shape = ggml_tensor_shape(t_perm)
    expect_equal(shape[0], 4)
    expect_equal(shape[1], 3)

    ggml_free(ctx)


def test_cont_makes_tensor_contiguous():
    """cont makes tensor contiguous"""
    ctx = ggml_init(16 * 1024 * 1024)

    t2d = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 3, 4)
    t_cont = ggml_cont(ctx, t2d)

    expect_type(t_cont, "externalptr")
    assert ggml_is_contiguous(t_cont)

    ggml_free(ctx)


def test_ggml_view_1d_creates_view_with_offset():
    """ggml_view_1d creates view with offset"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 10)
    ggml_set_f32(a, rng(1, 10))

    v = ggml_view_1d(ctx, a, 5, 2 * 4)
    expect_equal(ggml_nelements(v), 5)


def test_ggml_view_2d_creates_2d_view():
    """ggml_view_2d creates 2D view"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 12)
    ggml_set_f32(a, rng(1, 12))

    v = ggml_view_2d(ctx, a, 3, 4, 3 * 4, 0)
    shape = ggml_tensor_shape(v)
    expect_equal(shape[0], 3)
    expect_equal(shape[1], 4)


def test_ggml_view_3d_creates_3d_view():
    """ggml_view_3d creates 3D view"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 24)
    ggml_set_f32(a, rng(1, 24))

    v = ggml_view_3d(ctx, a, 2, 3, 4, 2 * 4, 6 * 4, 0)
    shape = ggml_tensor_shape(v)
    expect_equal(shape[0], 2)
    expect_equal(shape[1], 3)
    expect_equal(shape[2], 4)


def test_ggml_view_4d_creates_4d_view():
    """ggml_view_4d creates 4D view"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 48)
    ggml_set_f32(a, rng(1, 48))

    v = ggml_view_4d(ctx, a, 2, 2, 3, 4, 2 * 4, 4 * 4, 12 * 4, 0)
    shape = ggml_tensor_shape(v)
    expect_equal(shape[0], 2)
    expect_equal(shape[1], 2)
    expect_equal(shape[2], 3)
    expect_equal(shape[3], 4)

