"""Port of ggmlR's tests/testthat/test-memory-extended.R (ggmlR 0.8.2)."""
import numpy as np  # noqa: F401
import pytest  # noqa: F401

from ggmlpy import *  # noqa: F401,F403
from ggmlpy import GGMLError  # noqa: F401

from .rlike import *  # noqa: F401,F403


def test_set_no_alloc_and_get_no_alloc_work_correctly():
    """set_no_alloc and get_no_alloc work correctly"""
    ctx = ggml_init(4 * 1024 * 1024)

    assert not (ggml_get_no_alloc(ctx))

    ggml_set_no_alloc(ctx, True)
    assert ggml_get_no_alloc(ctx)

    ggml_set_no_alloc(ctx, False)
    assert not (ggml_get_no_alloc(ctx))

    ggml_free(ctx)


def test_get_max_tensor_size_returns_reasonable_value():
    """get_max_tensor_size returns reasonable value"""
    ctx = ggml_init(4 * 1024 * 1024)

    max_size = ggml_get_max_tensor_size(ctx)
    expect_type(max_size, "double")

    assert max_size >= 0

    ggml_free(ctx)


def test_print_objects_runs_without_error(capsys):
    """print_objects runs without error"""
    ctx = ggml_init(4 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 10)
    b = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 5, 5)

    ggml_print_objects(ctx)
    out = capsys.readouterr().out
    assert "2 tensors" in out and "ne=[10, 1, 1, 1]" in out and "ne=[5, 5, 1, 1]" in out

    ggml_free(ctx)


def test_print_mem_status_shows_correct_info():
    """print_mem_status shows correct info"""
    ctx = ggml_init(4 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 1000)

    result = ggml_print_mem_status(ctx)

    expect_type(result, "list")
    assert "total"  in  names(result)
    assert "used"  in  names(result)
    assert "free"  in  names(result)

    assert result["used"] > 0
    expect_equal(result["total"], result["used"] + result["free"])

    ggml_free(ctx)

