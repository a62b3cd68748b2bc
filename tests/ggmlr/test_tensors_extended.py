"""Port of ggmlR's tests/testthat/test-tensors-extended.R (ggmlR 0.8.2)."""
import numpy as np  # noqa: F401
import pytest  # noqa: F401

from ggmlpy import *  # noqa: F401,F403
from ggmlpy import GGMLError  # noqa: F401

from .rlike import *  # noqa: F401,F403


def test_3d_tensor_creation_works():
    """3D tensor creation works"""
    ctx = ggml_init(16 * 1024 * 1024)
    tensor = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, 10, 20, 30)

    expect_type(tensor, "externalptr")
    expect_equal(ggml_nelements(tensor), 10 * 20 * 30)
    expect_equal(ggml_n_dims(tensor), 3)

    shape = ggml_tensor_shape(tensor)
    expect_equal(shape[0], 10)
    expect_equal(shape[1], 20)
    expect_equal(shape[2], 30)
    expect_equal(shape[3], 1)

    ggml_free(ctx)


def test_4d_tensor_creation_works():
    """4D tensor creation works"""
    ctx = ggml_init(16 * 1024 * 1024)
    tensor = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, 2, 3, 4, 5)

    expect_type(tensor, "externalptr")
    expect_equal(ggml_nelements(tensor), 2 * 3 * 4 * 5)
    expect_equal(ggml_n_dims(tensor), 4)

    shape = ggml_tensor_shape(tensor)
    expect_equal(shape[0], 2)
    expect_equal(shape[1], 3)
    expect_equal(shape[2], 4)
    expect_equal(shape[3], 5)

    ggml_free(ctx)


def test_dup_tensor_creates_copy_with_same_shape():
    """dup_tensor creates copy with same shape"""
    ctx = ggml_init(4 * 1024 * 1024)
    original = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 10, 20)
    duplicate = ggml_dup_tensor(ctx, original)

    expect_type(duplicate, "externalptr")
    expect_equal(ggml_nelements(duplicate), ggml_nelements(original))
    expect_equal(ggml_tensor_shape(duplicate), ggml_tensor_shape(original))
    expect_equal(ggml_tensor_type(duplicate), ggml_tensor_type(original))

    ggml_free(ctx)


def test_tensor_info_functions_work_correctly():
    """tensor info functions work correctly"""
    ctx = ggml_init(4 * 1024 * 1024)
    tensor = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 10, 20)

    expect_equal(ggml_n_dims(tensor), 2)

    assert ggml_is_contiguous(tensor)

    assert not (ggml_is_transposed(tensor))

    assert not (ggml_is_permuted(tensor))

    expect_equal(ggml_tensor_type(tensor), GGML_TYPE_F32)

    ggml_free(ctx)


def test_tensor_shape_returns_correct_dimensions():
    """tensor_shape returns correct dimensions"""
    ctx = ggml_init(4 * 1024 * 1024)

    t1 = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 100)
    shape1 = ggml_tensor_shape(t1)
    expect_equal(shape1[0], 100)
    expect_equal(shape1[1], 1)

    t2 = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 10, 20)
    shape2 = ggml_tensor_shape(t2)
    expect_equal(shape2[0], 10)
    expect_equal(shape2[1], 20)

    ggml_free(ctx)

