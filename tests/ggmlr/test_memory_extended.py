"""Port of ggmlR's tests/testthat/test-memory-extended.R (ggmlR 0.8.2)."""
import numpy as np  # noqa: F401
import pytest  # noqa: F401

from ggmlpy import *  # noqa: F401,F403
from ggmlpy import GGMLError  # noqa: F401

from .rlike import *  # noqa: F401,F403

# Tests for extended memory management functions


def test_set_no_alloc_and_get_no_alloc_work_correctly():
    """set_no_alloc and get_no_alloc work correctly"""
    ctx = ggml_init(4 * 1024 * 1024)

    # Default should be FALSE
    assert not (ggml_get_no_alloc(ctx))

    # Set to TRUE
    ggml_set_no_alloc(ctx, True)
    assert ggml_get_no_alloc(ctx)

    # Set back to FALSE
    ggml_set_no_alloc(ctx, False)
    assert not (ggml_get_no_alloc(ctx))

    ggml_free(ctx)


def test_get_max_tensor_size_returns_reasonable_value():
    """get_max_tensor_size returns reasonable value"""
    ctx = ggml_init(4 * 1024 * 1024)

    max_size = ggml_get_max_tensor_size(ctx)
    expect_type(max_size, "double")

    # Max tensor size should be less than or equal to context size
    # (0 means not calculated yet, which is also valid)
    assert max_size >= 0

    ggml_free(ctx)


def test_print_objects_runs_without_error():
    """print_objects runs without error"""
    ctx = ggml_init(4 * 1024 * 1024)

    # Create some tensors
    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 10)
    b = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 5, 5)

    # Should not throw error (output goes to Rprintf, suppress it)
    ggml_print_objects(ctx)

    ggml_free(ctx)


def test_print_mem_status_shows_correct_info():
    """print_mem_status shows correct info"""
    ctx = ggml_init(4 * 1024 * 1024)

    # Create a tensor to use some memory
    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 1000)

    # Suppress console output, capture return value
    result = ggml_print_mem_status(ctx)

    expect_type(result, "list")
    assert "total"  in  names(result)
    assert "used"  in  names(result)
    assert "free"  in  names(result)

    assert result["used"] > 0
    expect_equal(result["total"], result["used"] + result["free"])

    ggml_free(ctx)

