"""Port of ggmlR's tests/testthat/test-scheduler.R: the backend scheduler on Vulkan devices.

Every block needs a Vulkan device (lavapipe with GGMLPY_SOFTWARE_VULKAN=1); the multi-GPU blocks
need two. R's rnorm draws are numpy's. ggml_backend_sched_graph_compute raises on failure where
ggmlR returns a status, so "status == 0" is "returns without raising".
"""
import numpy as np
import pytest

import ggmlpy as g

from ._backends import skip_without_vulkan
from .conftest import expect_equal

rng = np.random.default_rng(0)


def need_devices(n):
    if g.ggml_vulkan_device_count() < n:
        pytest.skip(f"Need at least {n} GPUs" if n > 1 else "No Vulkan devices found")


@skip_without_vulkan
def test_scheduler_basic_functionality_works():
    need_devices(1)
    gpu1 = g.ggml_vulkan_init(0)
    assert gpu1 is not None
    sched = g.ggml_backend_sched_new([gpu1], parallel=True)
    assert sched is not None
    assert g.ggml_backend_sched_get_n_backends(sched) == 2      # 1 GPU + 1 CPU (auto-added)
    assert g.ggml_backend_sched_get_backend(sched, 0) is not None
    g.ggml_backend_sched_free(sched)
    g.ggml_vulkan_free(gpu1)


@skip_without_vulkan
def test_multi_gpu_scheduler_works():
    need_devices(2)
    gpu1, gpu2 = g.ggml_vulkan_init(0), g.ggml_vulkan_init(1)
    assert gpu1 is not None and gpu2 is not None
    sched = g.ggml_backend_sched_new([gpu1, gpu2], parallel=True)
    assert sched is not None
    assert g.ggml_backend_sched_get_n_backends(sched) == 3
    g.ggml_backend_sched_free(sched)
    g.ggml_vulkan_free(gpu1)
    g.ggml_vulkan_free(gpu2)


def _add_graph(n):
    ctx = g.ggml_init_auto(64 * 1024 * 1024, no_alloc=True)
    a = g.ggml_new_tensor_1d(ctx, g.GGML_TYPE_F32, n)
    b = g.ggml_new_tensor_1d(ctx, g.GGML_TYPE_F32, n)
    c = g.ggml_add(ctx, a, b)
    return ctx, a, b, c, g.ggml_build_forward_expand(ctx, c)


@skip_without_vulkan
def test_scheduler_can_compute_simple_graphs():
    need_devices(1)
    gpu = g.ggml_vulkan_init(0)
    ctx, a, b, c, graph = _add_graph(1000)
    sched = g.ggml_backend_sched_new([gpu], parallel=True)
    assert g.ggml_backend_sched_alloc_graph(sched, graph)
    data_a, data_b = rng.standard_normal(1000), rng.standard_normal(1000)
    g.ggml_backend_tensor_set_data(a, data_a)
    g.ggml_backend_tensor_set_data(b, data_b)
    assert g.ggml_backend_sched_graph_compute(sched, graph) is None
    expect_equal(g.ggml_backend_tensor_get_data(c), data_a + data_b, rtol=1e-5, atol=1e-5)
    assert g.ggml_backend_sched_get_n_splits(sched) >= 0
    g.ggml_free(ctx)
    g.ggml_backend_sched_free(sched)
    g.ggml_vulkan_free(gpu)


@skip_without_vulkan
def test_multi_gpu_computation_distributes_work():
    need_devices(2)
    gpu1, gpu2 = g.ggml_vulkan_init(0), g.ggml_vulkan_init(1)
    ctx = g.ggml_init_auto(256 * 1024 * 1024, no_alloc=True)
    n = 100000
    a = g.ggml_new_tensor_1d(ctx, g.GGML_TYPE_F32, n)
    b = g.ggml_new_tensor_1d(ctx, g.GGML_TYPE_F32, n)
    c = g.ggml_add(ctx, a, b)
    two = g.ggml_new_f32(ctx, 2.0)
    d = g.ggml_mul(ctx, c, two)
    graph = g.ggml_build_forward_expand(ctx, d)
    sched = g.ggml_backend_sched_new([gpu1, gpu2], parallel=True)
    assert g.ggml_backend_sched_alloc_graph(sched, graph)
    data_a, data_b = rng.standard_normal(n), rng.standard_normal(n)
    g.ggml_backend_tensor_set_data(a, data_a)
    g.ggml_backend_tensor_set_data(b, data_b)
    g.ggml_backend_tensor_set_data(two, 2.0)
    assert g.ggml_backend_sched_graph_compute(sched, graph) is None
    expect_equal(g.ggml_backend_tensor_get_data(d), (data_a + data_b) * 2.0, rtol=1e-5, atol=1e-5)
    assert g.ggml_backend_sched_get_n_splits(sched) >= 0       # R prints these two
    assert g.ggml_backend_sched_get_n_copies(sched) >= 1
    g.ggml_free(ctx)
    g.ggml_backend_sched_free(sched)
    g.ggml_vulkan_free(gpu1)
    g.ggml_vulkan_free(gpu2)


@skip_without_vulkan
def test_scheduler_reset_works():
    need_devices(1)
    gpu = g.ggml_vulkan_init(0)
    sched = g.ggml_backend_sched_new([gpu], parallel=True)
    assert g.ggml_backend_sched_reset(sched) is None
    g.ggml_backend_sched_free(sched)
    g.ggml_vulkan_free(gpu)


@skip_without_vulkan
def test_scheduler_tensor_backend_assignment_works():
    need_devices(1)
    gpu = g.ggml_vulkan_init(0)
    sched = g.ggml_backend_sched_new([gpu], parallel=True)
    ctx, a, b, c, graph = _add_graph(100)
    g.ggml_backend_sched_reserve(sched, graph)
    backend_gpu = g.ggml_backend_sched_get_backend(sched, 0)
    assert g.ggml_backend_sched_set_tensor_backend(sched, a, backend_gpu) is None
    assert g.ggml_backend_sched_get_tensor_backend(sched, a) is not None
    g.ggml_free(ctx)
    g.ggml_backend_sched_free(sched)
    g.ggml_vulkan_free(gpu)


@skip_without_vulkan
def test_async_compute_and_synchronize_work():
    need_devices(1)
    gpu = g.ggml_vulkan_init(0)
    ctx, a, b, c, graph = _add_graph(1000)
    sched = g.ggml_backend_sched_new([gpu], parallel=True)
    assert g.ggml_backend_sched_alloc_graph(sched, graph)
    data_a, data_b = rng.standard_normal(1000), rng.standard_normal(1000)
    g.ggml_backend_tensor_set_data(a, data_a)
    g.ggml_backend_tensor_set_data(b, data_b)
    assert g.ggml_backend_sched_graph_compute_async(sched, graph) == 0
    assert g.ggml_backend_sched_synchronize(sched) is None
    expect_equal(g.ggml_backend_tensor_get_data(c), data_a + data_b, rtol=1e-5, atol=1e-5)
    g.ggml_free(ctx)
    g.ggml_backend_sched_free(sched)
    g.ggml_vulkan_free(gpu)
