"""Port of ggmlR's tests/testthat/test-backend-extended.R (ggmlR 0.8.2)."""
import numpy as np  # noqa: F401
import pytest  # noqa: F401

from ggmlpy import *  # noqa: F401,F403
from ggmlpy import GGMLError  # noqa: F401

from .rlike import *  # noqa: F401,F403


def test_async_graph_compute_works():
    """async graph compute works"""
    ctx = ggml_init(16 * 1024 * 1024, no_alloc = True)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    b = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    c_ = ggml_add(ctx, a, b)

    graph = ggml_build_forward_expand(ctx, c_)

    backend = ggml_backend_cpu_init()
    if (backend is None):
        pytest.skip("CPU backend not available")

    buffer = ggml_backend_alloc_ctx_tensors(ctx, backend)

    ggml_backend_tensor_set_data(a, c(1, 2, 3, 4))
    ggml_backend_tensor_set_data(b, c(5, 6, 7, 8))

    status = ggml_backend_graph_compute_async(backend, graph)
    expect_type(status, "integer")

    ggml_backend_synchronize(backend)

    result = ggml_backend_tensor_get_data(c_)
    expect_equal(result, c(6, 8, 10, 12), tolerance = 1e-5)


def test_multi_buffer_functions_work():
    """multi-buffer functions work"""
    backend = ggml_backend_cpu_init()
    if (backend is None):
        pytest.skip("CPU backend not available")


    ctx = ggml_init(1024 * 1024, no_alloc = True)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 10)
    buffer = ggml_backend_alloc_ctx_tensors(ctx, backend)

    is_multi = ggml_backend_buffer_is_multi_buffer(buffer)
    expect_type(is_multi, "logical")
    assert not (is_multi)


def test_graph_view_works():
    """graph_view works"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    b = ggml_add(ctx, a, a)
    c = ggml_mul(ctx, b, b)
    d = ggml_sqrt(ctx, c)

    graph = ggml_build_forward_expand(ctx, d)

    n_nodes = ggml_graph_n_nodes(graph)
    assert n_nodes >= 3

    if n_nodes >= 2:
      view = ggml_graph_view(graph, 0, 2)
      assert not ((view is None))


def test_op_can_inplace_works():
    """op_can_inplace works"""
    result = ggml_op_can_inplace(1)
    expect_type(result, "logical")

    result = ggml_op_can_inplace(0)
    expect_type(result, "logical")


def test_are_same_layout_works():
    """are_same_layout works"""
    ctx = ggml_init(1024 * 1024)

    a = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 4, 4)
    b = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 4, 4)
    assert ggml_are_same_layout(a, b)

    c = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 4, 8)
    assert not (ggml_are_same_layout(a, c))

    d = ggml_new_tensor_2d(ctx, GGML_TYPE_F16, 4, 4)
    assert not (ggml_are_same_layout(a, d))

    e = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 16)
    f = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 16)
    assert ggml_are_same_layout(e, f)


def test_backend_register_and_device_register_exist():
    """backend_register and device_register exist"""
    assert callable(ggml_backend_register)
    assert callable(ggml_backend_device_register)


def test_ggml_backend_load_returns_null_for_a_missing_shared_object():
    """ggml_backend_load returns NULL for a missing shared object"""
    res = ggml_backend_load("/nonexistent/libggml-doesnotexist.so")
    assert res is None


def test_ggml_backend_multi_buffer_alloc_buffer_wraps_real_buffers():
    """ggml_backend_multi_buffer_alloc_buffer wraps real buffers"""
    backend = ggml_backend_cpu_init()
    if (backend is None):
        pytest.skip("CPU backend not available")

    ctx1 = ggml_init(1024 * 1024, no_alloc = True)
    ctx2 = ggml_init(1024 * 1024, no_alloc = True)

    ggml_new_tensor_1d(ctx1, GGML_TYPE_F32, 10)
    ggml_new_tensor_1d(ctx2, GGML_TYPE_F32, 20)

    buf1 = ggml_backend_alloc_ctx_tensors(ctx1, backend)
    buf2 = ggml_backend_alloc_ctx_tensors(ctx2, backend)

    multi = ggml_backend_multi_buffer_alloc_buffer(rlist(buf1, buf2))

    assert not ((multi is None))
    assert ggml_backend_buffer_is_multi_buffer(multi)


def test_ggml_backend_multi_buffer_set_usage_runs_on_a_multi_buffer():
    """ggml_backend_multi_buffer_set_usage runs on a multi-buffer"""
    backend = ggml_backend_cpu_init()
    if (backend is None):
        pytest.skip("CPU backend not available")

    ctx = ggml_init(1024 * 1024, no_alloc = True)
    ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 16)
    buf = ggml_backend_alloc_ctx_tensors(ctx, backend)

    multi = ggml_backend_multi_buffer_alloc_buffer(rlist(buf))

    ggml_backend_multi_buffer_set_usage(multi, ggml_backend_buffer_usage_weights())
    assert all(ggml_backend_buffer_get_usage(b) == ggml_backend_buffer_usage_weights() for b in multi.parts)

