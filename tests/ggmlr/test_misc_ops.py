"""Port of ggmlR's tests/testthat/test-misc-ops.R (ggmlR 0.8.2)."""
import numpy as np  # noqa: F401
import pytest  # noqa: F401

from ggmlpy import *  # noqa: F401,F403
from ggmlpy import GGMLError  # noqa: F401

from .rlike import *  # noqa: F401,F403


def test_ggml_timestep_embedding_works():
    """ggml_timestep_embedding works"""
    ctx = ggml_init(1024 * 1024)

    timesteps = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 2)
    ggml_set_f32(timesteps, c(1.0, 10.0))
    ggml_set_input(timesteps)

    r = ggml_timestep_embedding(ctx, timesteps, dim = 8)
    ggml_set_output(r)

    backend = ggml_backend_cpu_init()
    ggml_backend_cpu_set_n_threads(backend, 2)

    graph = ggml_build_forward_expand(ctx, r)
    ggml_backend_graph_compute(backend, graph)
    result = ggml_get_f32(r).ravel()
    assert length(result) == 16
    assert all(is_finite(result))


def test_ggml_repeat_back_works():
    """ggml_repeat_back works"""
    ctx = ggml_init(1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 2)
    ggml_set_f32(a, c(0, 0))
    ggml_set_input(a)

    b = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    ggml_set_f32(b, c(1, 2, 3, 4))
    ggml_set_input(b)

    r = ggml_repeat_back(ctx, b, a)
    ggml_set_output(r)

    backend = ggml_backend_cpu_init()
    ggml_backend_cpu_set_n_threads(backend, 2)

    graph = ggml_build_forward_expand(ctx, r)
    ggml_backend_graph_compute(backend, graph)
    result = ggml_get_f32(r).ravel()
    assert length(result) == 2
    expect_equal(result, c(4, 6), tolerance = 1e-5)


def test_ggml_flash_attn_back_returns_externalptr():
    """ggml_flash_attn_back returns externalptr. ggmlR skips its own test: ggml's builder aborts ("TODO:
    adapt to ggml_flash_attn_ext() changes"). ggmlpy checks the operands, then raises instead of aborting."""
    ctx = ggml_init(4 * 1024 * 1024)

    d = 8
    n = 4

    q = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, d, n)
    k = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, d, n)
    v = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n, d)  # transposed, as ggml wants it
    grad = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, d, n)
    with pytest.raises(GGMLError, match="v must be transposed"):
        ggml_flash_attn_back(ctx, q, k, grad, grad, True)
    with pytest.raises(GGMLError, match="does not implement it"):
        ggml_flash_attn_back(ctx, q, k, v, grad, True)
    ggml_free(ctx)


def test_ggml_rms_norm_back_computes_gradient():
    """ggml_rms_norm_back computes gradient"""
    ctx = ggml_init(1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    b = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    ggml_set_f32(a, c(1, 2, 3, 4))
    ggml_set_f32(b, c(1, 1, 1, 1))
    ggml_set_input(a)
    ggml_set_input(b)

    r = ggml_rms_norm_back(ctx, a, b, 1e-5)
    ggml_set_output(r)

    backend = ggml_backend_cpu_init()
    ggml_backend_cpu_set_n_threads(backend, 2)

    graph = ggml_build_forward_expand(ctx, r)
    ggml_backend_graph_compute(backend, graph)
    result = ggml_get_f32(r).ravel()
    assert length(result) == 4
    assert all(is_finite(result))


def test_ggml_silu_back_computes_gradient():
    """ggml_silu_back computes gradient"""
    ctx = ggml_init(1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    b = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    ggml_set_f32(a, c(0, 1, -1, 2))
    ggml_set_f32(b, c(1, 1, 1, 1))
    ggml_set_input(a)
    ggml_set_input(b)

    r = ggml_silu_back(ctx, b, a)
    ggml_set_output(r)

    backend = ggml_backend_cpu_init()
    ggml_backend_cpu_set_n_threads(backend, 2)

    graph = ggml_build_forward_expand(ctx, r)
    ggml_backend_graph_compute(backend, graph)
    result = ggml_get_f32(r).ravel()
    assert length(result) == 4
    assert all(is_finite(result))
    expect_equal(result[0], 0.5, tolerance = 1e-4)


def test_ggml_group_norm_inplace_works():
    """ggml_group_norm_inplace works"""
    ctx = ggml_init(1024 * 1024)

    a = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 4, 2)
    ggml_set_f32(a, c(1, 2, 3, 4, 5, 6, 7, 8))
    ggml_set_input(a)

    r = ggml_group_norm_inplace(ctx, a, 2)
    ggml_set_output(r)

    backend = ggml_backend_cpu_init()
    ggml_backend_cpu_set_n_threads(backend, 2)

    graph = ggml_build_forward_expand(ctx, r)
    ggml_backend_graph_compute(backend, graph)
    result = ggml_get_f32(r).ravel()
    assert length(result) == 8
    assert all(is_finite(result))

