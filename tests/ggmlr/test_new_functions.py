"""Port of ggmlR's tests/testthat/test-new-functions.R (ggmlR 0.8.2)."""
import numpy as np  # noqa: F401
import pytest  # noqa: F401

from ggmlpy import *  # noqa: F401,F403
from ggmlpy import GGMLError  # noqa: F401

from .rlike import *  # noqa: F401,F403


def test_ggml_new_i32_creates_scalar_i32_tensor():
    """ggml_new_i32 creates scalar i32 tensor"""
    ctx = ggml_init(1024 * 1024)

    scalar = ggml_new_i32(ctx, 42)
    assert not ((scalar is None))

    shape = ggml_tensor_shape(scalar)
    expect_equal(prod(shape), 1)


def test_ggml_new_f32_creates_scalar_f32_tensor():
    """ggml_new_f32 creates scalar f32 tensor"""
    ctx = ggml_init(1024 * 1024)

    scalar = ggml_new_f32(ctx, 3.14)
    assert not ((scalar is None))

    shape = ggml_tensor_shape(scalar)
    expect_equal(prod(shape), 1)


def test_ggml_view_1d_creates_1d_view_with_offset():
    """ggml_view_1d creates 1D view with offset"""
    ctx = ggml_init(1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 100)
    assert not ((a is None))

    v = ggml_view_1d(ctx, a, 10, 40)
    assert not ((v is None))

    shape = ggml_tensor_shape(v)
    expect_equal(shape[0], 10)


def test_ggml_view_2d_creates_2d_view_with_offset():
    """ggml_view_2d creates 2D view with offset"""
    ctx = ggml_init(1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 100)
    assert not ((a is None))

    v = ggml_view_2d(ctx, a, 5, 4, 20, 0)
    assert not ((v is None))

    shape = ggml_tensor_shape(v)
    expect_equal(shape[0], 5)
    expect_equal(shape[1], 4)


def test_ggml_view_3d_creates_3d_view_with_offset():
    """ggml_view_3d creates 3D view with offset"""
    ctx = ggml_init(1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 120)
    assert not ((a is None))

    v = ggml_view_3d(ctx, a, 4, 5, 6, 16, 80, 0)
    assert not ((v is None))

    shape = ggml_tensor_shape(v)
    expect_equal(shape[0], 4)
    expect_equal(shape[1], 5)
    expect_equal(shape[2], 6)


def test_ggml_view_4d_creates_4d_view_with_offset():
    """ggml_view_4d creates 4D view with offset"""
    ctx = ggml_init(1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 240)
    assert not ((a is None))

    v = ggml_view_4d(ctx, a, 2, 3, 4, 5, 8, 24, 96, 0)
    assert not ((v is None))

    shape = ggml_tensor_shape(v)
    expect_equal(shape[0], 2)
    expect_equal(shape[1], 3)
    expect_equal(shape[2], 4)
    expect_equal(shape[3], 5)


def test_ggml_cpy_creates_copy_operation():
    """ggml_cpy creates copy operation"""
    ctx = ggml_init(1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 10)
    b = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 10)
    assert not ((a is None))
    assert not ((b is None))

    result = ggml_cpy(ctx, a, b)
    assert not ((result is None))


def test_ggml_set_1d_creates_set_operation():
    """ggml_set_1d creates set operation"""
    ctx = ggml_init(1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 100)
    b = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 10)
    assert not ((a is None))
    assert not ((b is None))

    result = ggml_set_1d(ctx, a, b, 0)
    assert not ((result is None))


def test_ggml_set_2d_creates_2d_set_operation():
    """ggml_set_2d creates 2D set operation"""
    ctx = ggml_init(1024 * 1024)

    a = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 10, 10)
    b = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 5, 5)
    assert not ((a is None))
    assert not ((b is None))

    result = ggml_set_2d(ctx, a, b, 20, 0)
    assert not ((result is None))


def test_ggml_out_prod_creates_outer_product_operation():
    """ggml_out_prod creates outer product operation"""
    ctx = ggml_init(1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 3)
    b = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    assert not ((a is None))
    assert not ((b is None))

    result = ggml_out_prod(ctx, a, b)
    assert not ((result is None))

    shape = ggml_tensor_shape(result)
    expect_equal(shape[0], 3)
    expect_equal(shape[1], 4)


def test_ggml_diag_creates_diagonal_matrix():
    """ggml_diag creates diagonal matrix"""
    ctx = ggml_init(1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    assert not ((a is None))

    result = ggml_diag(ctx, a)
    assert not ((result is None))


def test_ggml_concat_concatenates_tensors():
    """ggml_concat concatenates tensors"""
    ctx = ggml_init(1024 * 1024)

    a = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 4, 3)
    b = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 4, 2)
    assert not ((a is None))
    assert not ((b is None))

    result = ggml_concat(ctx, a, b, 1)
    assert not ((result is None))

    shape = ggml_tensor_shape(result)
    expect_equal(shape[0], 4)
    expect_equal(shape[1], 5)


def test_ggml_mul_mat_id_creates_moe_matmul_operation():
    """ggml_mul_mat_id creates MoE matmul operation"""
    ctx = ggml_init(4 * 1024 * 1024)

    experts = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, 8, 16, 4)
    input = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 8, 2)
    ids = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, 2)

    assert not ((experts is None))
    assert not ((input is None))
    assert not ((ids is None))

    result = ggml_mul_mat_id(ctx, experts, input, ids)
    assert not ((result is None))


def test_ggml_silu_back_creates_silu_backward_operation():
    """ggml_silu_back creates SiLU backward operation"""
    ctx = ggml_init(1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 10)
    b = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 10)
    assert not ((a is None))
    assert not ((b is None))

    result = ggml_silu_back(ctx, a, b)
    assert not ((result is None))


def test_ggml_get_rows_back_creates_get_rows_backward_operation():
    """ggml_get_rows_back creates get_rows backward operation"""
    ctx = ggml_init(1024 * 1024)

    a = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 8, 3)
    b = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, 3)
    c = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 8, 10)

    assert not ((a is None))
    assert not ((b is None))
    assert not ((c is None))

    result = ggml_get_rows_back(ctx, a, b, c)
    assert not ((result is None))


def test_ggml_soft_max_ext_back_creates_softmax_backward_operation():
    """ggml_soft_max_ext_back creates softmax backward operation"""
    ctx = ggml_init(1024 * 1024)

    a = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 10, 5)
    b = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 10, 5)
    assert not ((a is None))
    assert not ((b is None))

    result = ggml_soft_max_ext_back(ctx, a, b, scale = 1.0, max_bias = 0.0)
    assert not ((result is None))


def test_ggml_rope_ext_back_creates_rope_backward_operation():
    """ggml_rope_ext_back creates RoPE backward operation"""
    ctx = ggml_init(2 * 1024 * 1024)

    a = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, 64, 8, 16, 1)
    b = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, 16)

    assert not ((a is None))
    assert not ((b is None))

    result = ggml_rope_ext_back(ctx, a, b, c = None,
                                 n_dims = 64, mode = 0, n_ctx_orig = 2048,
                                 freq_base = 10000.0, freq_scale = 1.0,
                                 ext_factor = 0.0, attn_factor = 1.0,
                                 beta_fast = 32.0, beta_slow = 1.0)
    assert not ((result is None))


