"""Port of ggmlR's tests/testthat/test-tensor-info.R (ggmlR 0.8.2)."""
import numpy as np  # noqa: F401
import pytest  # noqa: F401

from ggmlpy import *  # noqa: F401,F403
from ggmlpy import GGMLError  # noqa: F401

from .rlike import *  # noqa: F401,F403


def test_ggml_type_size_returns_correct_sizes():
    """ggml_type_size returns correct sizes"""
    expect_equal(ggml_type_size(GGML_TYPE_F32), 4)

    expect_equal(ggml_type_size(GGML_TYPE_F16), 2)

    expect_equal(ggml_type_size(GGML_TYPE_I32), 4)


def test_ggml_element_size_returns_element_size_for_f32_tensor():
    """ggml_element_size returns element size for F32 tensor"""
    ctx = ggml_init(1024 * 1024)

    t = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 10)
    expect_equal(ggml_element_size(t), 4)


def test_ggml_element_size_returns_element_size_for_i32_tensor():
    """ggml_element_size returns element size for I32 tensor"""
    ctx = ggml_init(1024 * 1024)

    t = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, 10)
    expect_equal(ggml_element_size(t), 4)


def test_ggml_nrows_returns_correct_number_of_rows():
    """ggml_nrows returns correct number of rows"""
    ctx = ggml_init(1024 * 1024)

    t1d = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 10)
    expect_equal(ggml_nrows(t1d), 1)

    t2d = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 5, 3)
    expect_equal(ggml_nrows(t2d), 3)

    t3d = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, 4, 3, 2)
    expect_equal(ggml_nrows(t3d), 6)


def test_ggml_are_same_shape_detects_same_shapes():
    """ggml_are_same_shape detects same shapes"""
    ctx = ggml_init(1024 * 1024)

    a = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 4, 5)
    b = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 4, 5)

    assert ggml_are_same_shape(a, b)


def test_ggml_are_same_shape_detects_different_shapes():
    """ggml_are_same_shape detects different shapes"""
    ctx = ggml_init(1024 * 1024)

    a = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 4, 5)
    b = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 5, 4)

    assert not (ggml_are_same_shape(a, b))


def test_ggml_are_same_shape_with_different_dimensions():
    """ggml_are_same_shape with different dimensions"""
    ctx = ggml_init(1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 20)
    b = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 4, 5)

    assert not (ggml_are_same_shape(a, b))


def test_ggml_set_name_and_ggml_get_name_work():
    """ggml_set_name and ggml_get_name work"""
    ctx = ggml_init(1024 * 1024)

    t = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 10)
    ggml_set_name(t, "my_tensor")

    name = ggml_get_name(t)
    expect_equal(name, "my_tensor")


def test_ggml_set_name_with_empty_string_returns_null_or_empty():
    """ggml_set_name with empty string returns NULL or empty"""
    ctx = ggml_init(1024 * 1024)

    t = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 10)
    ggml_set_name(t, "")

    name = ggml_get_name(t)
    assert (name is None)  or  name == ""


def test_ggml_tensor_shape_returns_correct_shape_for_1d():
    """ggml_tensor_shape returns correct shape for 1D"""
    ctx = ggml_init(1024 * 1024)

    t = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 10)
    shape = ggml_tensor_shape(t)

    assert length(shape) == 4
    expect_equal(shape[0], 10)
    expect_equal(shape[1], 1)
    expect_equal(shape[2], 1)
    expect_equal(shape[3], 1)


def test_ggml_tensor_shape_returns_correct_shape_for_2d():
    """ggml_tensor_shape returns correct shape for 2D"""
    ctx = ggml_init(1024 * 1024)

    t = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 5, 7)
    shape = ggml_tensor_shape(t)

    expect_equal(shape[0], 5)
    expect_equal(shape[1], 7)


def test_ggml_tensor_shape_returns_correct_shape_for_3d():
    """ggml_tensor_shape returns correct shape for 3D"""
    ctx = ggml_init(1024 * 1024)

    t = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, 3, 4, 5)
    shape = ggml_tensor_shape(t)

    expect_equal(shape[0], 3)
    expect_equal(shape[1], 4)
    expect_equal(shape[2], 5)


def test_ggml_tensor_shape_returns_correct_shape_for_4d():
    """ggml_tensor_shape returns correct shape for 4D"""
    ctx = ggml_init(1024 * 1024)

    t = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, 2, 3, 4, 5)
    shape = ggml_tensor_shape(t)

    expect_equal(shape[0], 2)
    expect_equal(shape[1], 3)
    expect_equal(shape[2], 4)
    expect_equal(shape[3], 5)


def test_ggml_tensor_type_returns_correct_type():
    """ggml_tensor_type returns correct type"""
    ctx = ggml_init(1024 * 1024)

    t_f32 = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 10)
    expect_equal(ggml_tensor_type(t_f32), GGML_TYPE_F32)

    t_i32 = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, 10)
    expect_equal(ggml_tensor_type(t_i32), GGML_TYPE_I32)


def test_ggml_nelements_returns_correct_count():
    """ggml_nelements returns correct count"""
    ctx = ggml_init(1024 * 1024)

    t1d = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 10)
    expect_equal(ggml_nelements(t1d), 10)

    t2d = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 4, 5)
    expect_equal(ggml_nelements(t2d), 20)

    t3d = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, 2, 3, 4)
    expect_equal(ggml_nelements(t3d), 24)

    t4d = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, 2, 3, 4, 5)
    expect_equal(ggml_nelements(t4d), 120)


def test_ggml_nbytes_returns_correct_byte_count():
    """ggml_nbytes returns correct byte count"""
    ctx = ggml_init(1024 * 1024)

    t = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 10)
    expect_equal(ggml_nbytes(t), 40)


def test_ggml_n_dims_returns_correct_dimension_count():
    """ggml_n_dims returns correct dimension count"""
    ctx = ggml_init(1024 * 1024)

    t1d = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 10)
    expect_equal(ggml_n_dims(t1d), 1)

    t2d = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 4, 5)
    expect_equal(ggml_n_dims(t2d), 2)

    t3d = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, 2, 3, 4)
    expect_equal(ggml_n_dims(t3d), 3)

    t4d = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, 2, 3, 4, 5)
    expect_equal(ggml_n_dims(t4d), 4)


def test_ggml_is_contiguous_returns_true_for_new_tensors():
    """ggml_is_contiguous returns true for new tensors"""
    ctx = ggml_init(1024 * 1024)

    t = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 4, 5)
    assert ggml_is_contiguous(t)


def test_ggml_is_transposed_returns_false_for_new_tensors():
    """ggml_is_transposed returns false for new tensors"""
    ctx = ggml_init(1024 * 1024)

    t = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 4, 5)
    assert not (ggml_is_transposed(t))


def test_ggml_is_permuted_returns_false_for_new_tensors():
    """ggml_is_permuted returns false for new tensors"""
    ctx = ggml_init(1024 * 1024)

    t = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 4, 5)
    assert not (ggml_is_permuted(t))


def test_ggml_new_tensor_creates_tensor_with_arbitrary_dims():
    """ggml_new_tensor creates tensor with arbitrary dims"""
    ctx = ggml_init(1024 * 1024)

    t = ggml_new_tensor(ctx, GGML_TYPE_F32, n_dims = 3, ne = c(4, 5, 6))
    shape = ggml_tensor_shape(t)

    expect_equal(shape[0], 4)
    expect_equal(shape[1], 5)
    expect_equal(shape[2], 6)
    expect_equal(ggml_nelements(t), 120)


def test_ggml_dup_tensor_creates_tensor_with_same_shape():
    """ggml_dup_tensor creates tensor with same shape"""
    ctx = ggml_init(1024 * 1024)

    original = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 4, 5)
    duplicate = ggml_dup_tensor(ctx, original)

    expect_equal(ggml_nelements(duplicate), ggml_nelements(original))
    expect_equal(ggml_tensor_shape(duplicate), ggml_tensor_shape(original))
    expect_equal(ggml_tensor_type(duplicate), ggml_tensor_type(original))

