"""Port of ggmlR's tests/testthat/test-memory.R (ggmlR 0.8.2)."""
import numpy as np  # noqa: F401
import pytest  # noqa: F401

from ggmlpy import *  # noqa: F401,F403
from ggmlpy import GGMLError  # noqa: F401

from .rlike import *  # noqa: F401,F403


def test_ggml_tensor_overhead_returns_positive_value():
    """ggml_tensor_overhead returns positive value"""
    overhead = ggml_tensor_overhead()
    expect_type(overhead, "double")
    assert overhead > 0
    assert overhead < 10000


def test_ggml_get_mem_size_returns_context_size():
    """ggml_get_mem_size returns context size"""
    size = 16 * 1024 * 1024
    ctx = ggml_init(size)

    mem_size = ggml_get_mem_size(ctx)
    expect_type(mem_size, "double")
    expect_equal(mem_size, size, tolerance = 1000)

    ggml_free(ctx)


def test_ggml_used_mem_tracks_memory_usage():
    """ggml_used_mem tracks memory usage"""
    ctx = ggml_init(16 * 1024 * 1024)

    used_initial = ggml_used_mem(ctx)
    expect_equal(used_initial, 0)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 1000)
    used_after = ggml_used_mem(ctx)

    assert used_after > used_initial
    assert used_after >= 1000 * 4

    ggml_free(ctx)


def test_ggml_estimate_memory_gives_reasonable_estimates():
    """ggml_estimate_memory gives reasonable estimates"""
    est_1d = ggml_estimate_memory(GGML_TYPE_F32, 1000)
    assert est_1d >= 1000 * 4
    assert est_1d < 1000 * 4 + 1000

    est_2d = ggml_estimate_memory(GGML_TYPE_F32, 100, 100)
    assert est_2d >= 10000 * 4

    est_3d = ggml_estimate_memory(GGML_TYPE_F32, 10, 10, 10)
    assert est_3d >= 1000 * 4


def test_ggml_print_mem_status_works():
    """ggml_print_mem_status works"""
    ctx = ggml_init(16 * 1024 * 1024)

    info = ggml_print_mem_status(ctx)
    expect_type(info, "list")
    assert list(info) == ["total", "used", "free"]

    expect_equal(info["total"], 16 * 1024 * 1024, tolerance = 1000)
    expect_equal(info["used"] + info["free"], info["total"], tolerance = 10)

    ggml_free(ctx)

