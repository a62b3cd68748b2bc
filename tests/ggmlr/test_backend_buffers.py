"""Port of ggmlR's tests/testthat/test-backend-buffers.R (ggmlR 0.8.2)."""
import numpy as np  # noqa: F401
import pytest  # noqa: F401

from ggmlpy import *  # noqa: F401,F403
from ggmlpy import GGMLError  # noqa: F401

from .rlike import *  # noqa: F401,F403


def test_ggml_backend_alloc_ctx_tensors_allocates_buffer():
    """ggml_backend_alloc_ctx_tensors allocates buffer"""
    ctx = ggml_init(16 * 1024 * 1024)
    ggml_set_no_alloc(ctx, True)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 100)

    backend = ggml_backend_cpu_init()
    buffer = ggml_backend_alloc_ctx_tensors(ctx, backend)

    expect_type(buffer, "externalptr")
    assert not ((buffer is None))

    ggml_backend_buffer_free(buffer)
    ggml_backend_free(backend)
    ggml_free(ctx)


def test_ggml_backend_buffer_name_returns_buffer_name():
    """ggml_backend_buffer_name returns buffer name"""
    ctx = ggml_init(16 * 1024 * 1024)
    ggml_set_no_alloc(ctx, True)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 100)

    backend = ggml_backend_cpu_init()
    buffer = ggml_backend_alloc_ctx_tensors(ctx, backend)

    name = ggml_backend_buffer_name(buffer)
    expect_type(name, "character")
    assert nchar(name) > 0

    ggml_backend_buffer_free(buffer)
    ggml_backend_free(backend)
    ggml_free(ctx)


def test_ggml_backend_buffer_get_size_returns_positive_size():
    """ggml_backend_buffer_get_size returns positive size"""
    ctx = ggml_init(16 * 1024 * 1024)
    ggml_set_no_alloc(ctx, True)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 1000)

    backend = ggml_backend_cpu_init()
    buffer = ggml_backend_alloc_ctx_tensors(ctx, backend)

    size = ggml_backend_buffer_get_size(buffer)
    assert size > 0
    assert size >= 4000

    ggml_backend_buffer_free(buffer)
    ggml_backend_free(backend)
    ggml_free(ctx)


def test_ggml_backend_buffer_free_works_without_error():
    """ggml_backend_buffer_free works without error"""
    ctx = ggml_init(16 * 1024 * 1024)
    ggml_set_no_alloc(ctx, True)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 100)

    backend = ggml_backend_cpu_init()
    buffer = ggml_backend_alloc_ctx_tensors(ctx, backend)

    assert ggml_backend_buffer_get_size(buffer) >= 400
    ggml_backend_buffer_free(buffer)
    with pytest.raises(GGMLError, match="freed"):  # the handle refuses use after free, ggml would read freed memory
        ggml_backend_buffer_get_size(buffer)
    ggml_backend_buffer_free(buffer)  # a second free is a no-op

    ggml_backend_free(backend)
    ggml_free(ctx)


def test_ggml_backend_tensor_set_data_and_get_data_roundtrip():
    """ggml_backend_tensor_set_data and get_data roundtrip"""
    ctx = ggml_init(16 * 1024 * 1024)
    ggml_set_no_alloc(ctx, True)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)

    backend = ggml_backend_cpu_init()
    buffer = ggml_backend_alloc_ctx_tensors(ctx, backend)

    data_in = c(1.1, 2.2, 3.3, 4.4, 5.5)
    ggml_backend_tensor_set_data(a, data_in)
    data_out = ggml_backend_tensor_get_data(a)

    expect_equal(data_out, data_in, tolerance = 1e-6)

    ggml_backend_buffer_free(buffer)
    ggml_backend_free(backend)
    ggml_free(ctx)


def test_ggml_backend_tensor_set_data_handles_large_tensors():
    """ggml_backend_tensor_set_data handles large tensors"""
    ctx = ggml_init(64 * 1024 * 1024)
    ggml_set_no_alloc(ctx, True)

    n = 10000
    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, n)

    backend = ggml_backend_cpu_init()
    buffer = ggml_backend_alloc_ctx_tensors(ctx, backend)

    data_in = rnorm(n)
    ggml_backend_tensor_set_data(a, data_in)
    data_out = ggml_backend_tensor_get_data(a)

    expect_equal(data_out, data_in, tolerance = 1e-5)

    ggml_backend_buffer_free(buffer)
    ggml_backend_free(backend)
    ggml_free(ctx)


def test_ggml_backend_tensor_set_data_handles_2d_tensors():
    """ggml_backend_tensor_set_data handles 2D tensors"""
    ctx = ggml_init(16 * 1024 * 1024)
    ggml_set_no_alloc(ctx, True)

    a = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 4, 5)

    backend = ggml_backend_cpu_init()
    buffer = ggml_backend_alloc_ctx_tensors(ctx, backend)

    data_in = as_numeric(rng(1, 20))
    ggml_backend_tensor_set_data(a, data_in)
    data_out = ggml_backend_tensor_get_data(a)

    expect_equal(data_out, data_in, tolerance = 1e-6)

    ggml_backend_buffer_free(buffer)
    ggml_backend_free(backend)
    ggml_free(ctx)


def test_ggml_gallocr_new_creates_allocator():
    """ggml_gallocr_new creates allocator"""
    galloc = ggml_gallocr_new()
    expect_type(galloc, "externalptr")
    assert not ((galloc is None))

    ggml_gallocr_free(galloc)


def test_ggml_gallocr_reserve_and_alloc_graph_work():
    """ggml_gallocr_reserve and alloc_graph work"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 100)
    b = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 100)
    c = ggml_add(ctx, a, b)

    graph = ggml_build_forward_expand(ctx, c)

    galloc = ggml_gallocr_new()

    success = ggml_gallocr_reserve(galloc, graph)
    assert success

    result = ggml_gallocr_alloc_graph(galloc, graph)
    assert result

    ggml_gallocr_free(galloc)


def test_ggml_gallocr_get_buffer_size_returns_size():
    """ggml_gallocr_get_buffer_size returns size"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 1000)
    b = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 1000)
    c = ggml_add(ctx, a, b)

    graph = ggml_build_forward_expand(ctx, c)

    galloc = ggml_gallocr_new()
    ggml_gallocr_reserve(galloc, graph)

    size = ggml_gallocr_get_buffer_size(galloc, buffer_id = 0)
    expect_type(size, "double")
    assert size >= 0

    ggml_gallocr_free(galloc)


def test_ggml_gallocr_free_is_safe_to_call():
    """ggml_gallocr_free is safe to call"""
    galloc = ggml_gallocr_new()
    ggml_gallocr_free(galloc)
    ggml_gallocr_free(galloc)  # twice: safe
    assert ggml_gallocr_get_buffer_size(galloc) == 0  # a freed allocator holds no buffer


def test_multiple_buffers_can_be_allocated():
    """multiple buffers can be allocated"""
    ctx1 = ggml_init(16 * 1024 * 1024)
    ctx2 = ggml_init(16 * 1024 * 1024)
    ggml_set_no_alloc(ctx1, True)
    ggml_set_no_alloc(ctx2, True)

    a1 = ggml_new_tensor_1d(ctx1, GGML_TYPE_F32, 100)
    a2 = ggml_new_tensor_1d(ctx2, GGML_TYPE_F32, 200)

    backend = ggml_backend_cpu_init()

    buffer1 = ggml_backend_alloc_ctx_tensors(ctx1, backend)
    buffer2 = ggml_backend_alloc_ctx_tensors(ctx2, backend)

    expect_type(buffer1, "externalptr")
    expect_type(buffer2, "externalptr")

    ggml_backend_buffer_free(buffer1)
    ggml_backend_buffer_free(buffer2)
    ggml_backend_free(backend)
    ggml_free(ctx1)
    ggml_free(ctx2)

