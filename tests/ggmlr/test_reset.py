"""Port of ggmlR's tests/testthat/test-reset.R (ggmlR 0.8.2)."""
import numpy as np  # noqa: F401
import pytest  # noqa: F401

from ggmlpy import *  # noqa: F401,F403
from ggmlpy import GGMLError  # noqa: F401

from .rlike import *  # noqa: F401,F403


def test_ggml_reset_clears_context_memory():
    """ggml_reset clears context memory"""
    ctx = ggml_init(50 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 1000000)

    used_before = ggml_used_mem(ctx)
    assert used_before > 0

    ggml_reset(ctx)

    used_after = ggml_used_mem(ctx)
    expect_equal(used_after, 0)

    ggml_free(ctx)


def test_ggml_reset_allows_reusing_context():
    """ggml_reset allows reusing context"""
    ctx = ggml_init(50 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5000000)
    used_1 = ggml_used_mem(ctx)

    ggml_reset(ctx)

    b = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5000000)
    used_2 = ggml_used_mem(ctx)

    expect_equal(used_1, used_2, tolerance = 100)

    ggml_free(ctx)


def test_ggml_reset_works_multiple_times():
    """ggml_reset works multiple times"""
    ctx = ggml_init(50 * 1024 * 1024)

    for i in rng(1, 10):
      a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 1000000)

      ggml_reset(ctx)

      expect_equal(ggml_used_mem(ctx), 0)

    ggml_free(ctx)


def test_ggml_reset_enables_memory_reuse():
    """ggml_reset enables memory reuse"""
    ctx = ggml_init(30 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 7000000)
    used_after_first = ggml_used_mem(ctx)
    free_after_first = ggml_get_mem_size(ctx) - used_after_first

    assert free_after_first < 5 * 1024 * 1024

    ggml_reset(ctx)
    expect_equal(ggml_used_mem(ctx), 0)

    b = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 7000000)
    expect_type(b, "externalptr")

    ggml_free(ctx)


def test_ggml_reset_with_data_operations():
    """ggml_reset with data operations"""
    ctx = ggml_init(50 * 1024 * 1024)

    a1 = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 100)
    ggml_set_f32(a1, rng(1, 100))
    data1 = ggml_get_f32(a1).ravel()
    expect_equal(data1, rng(1, 100))

    ggml_reset(ctx)

    a2 = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 100)
    ggml_set_f32(a2, rng(101, 200))
    data2 = ggml_get_f32(a2).ravel()
    expect_equal(data2, rng(101, 200))

    ggml_free(ctx)


def test_ggml_reset_works_with_large_matrices():
    """ggml_reset works with large matrices"""
    ctx = ggml_init(100 * 1024 * 1024)

    m1 = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 1000, 1000)
    used1 = ggml_used_mem(ctx)

    ggml_reset(ctx)
    expect_equal(ggml_used_mem(ctx), 0)

    m2 = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 2000, 2000)
    used2 = ggml_used_mem(ctx)

    assert used2 > used1

    ggml_free(ctx)

