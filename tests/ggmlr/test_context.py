"""Port of ggmlR's tests/testthat/test-context.R (ggmlR 0.8.2)."""
import numpy as np  # noqa: F401
import pytest  # noqa: F401

from ggmlpy import *  # noqa: F401,F403
from ggmlpy import GGMLError  # noqa: F401

from .rlike import *  # noqa: F401,F403


def test_context_initialization_works():
    """context initialization works"""
    ctx = ggml_init(1024 * 1024)
    expect_type(ctx, "externalptr")
    ggml_free(ctx)


def test_context_can_be_freed():
    """context can be freed"""
    ctx = ggml_init(1024 * 1024)
    ggml_free(ctx)
    with pytest.raises(GGMLError, match="freed"):  # its tensors can no longer be made or used
        ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)


def test_context_can_be_reset():
    """context can be reset"""
    ctx = ggml_init(10 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 10000)
    assert ggml_used_mem(ctx) > 0

    ggml_reset(ctx)
    expect_equal(ggml_used_mem(ctx), 0)

    ggml_free(ctx)


def test_multiple_contexts_can_coexist():
    """multiple contexts can coexist"""
    ctx1 = ggml_init(1024 * 1024)
    ctx2 = ggml_init(2 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx1, GGML_TYPE_F32, 100)
    b = ggml_new_tensor_1d(ctx2, GGML_TYPE_F32, 200)

    expect_equal(ggml_nelements(a), 100)
    expect_equal(ggml_nelements(b), 200)

    ggml_free(ctx1)
    ggml_free(ctx2)


def test_ggml_set_n_threads_and_ggml_get_n_threads_work():
    """ggml_set_n_threads and ggml_get_n_threads work"""
    original = ggml_get_n_threads()
    assert original >= 1

    result = ggml_set_n_threads(2)
    assert result >= 1

    assert ggml_get_n_threads() >= 1

    ggml_set_n_threads(original)

