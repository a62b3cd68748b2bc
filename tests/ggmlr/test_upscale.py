"""Port of ggmlR's tests/testthat/test-upscale.R (ggmlR 0.8.2)."""
import numpy as np  # noqa: F401
import pytest  # noqa: F401

from ggmlpy import *  # noqa: F401,F403
from ggmlpy import GGMLError  # noqa: F401

from .rlike import *  # noqa: F401,F403


def test_scale_mode_constants_are_defined_correctly():
    """scale-mode constants are defined correctly"""
    expect_equal(GGML_SCALE_MODE_NEAREST, 0)
    expect_equal(GGML_SCALE_MODE_BILINEAR, 1)
    expect_equal(GGML_SCALE_MODE_BICUBIC, 2)


def test_ggml_upscale_nearest_doubles_spatial_dims():
    """ggml_upscale nearest doubles spatial dims"""
    ctx = ggml_init(16 * 1024 * 1024)
    a = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, 2, 2, 1, 1)
    ggml_set_f32(a, c(1, 2, 3, 4))

    up = ggml_upscale(ctx, a, 2, GGML_SCALE_MODE_NEAREST)
    graph = ggml_build_forward_expand(ctx, up)
    ggml_graph_compute(ctx, graph)

    shape = ggml_tensor_shape(up)
    expect_equal(shape[0], 4)
    expect_equal(shape[1], 4)
    res = ggml_get_f32(up).ravel()
    expect_equal(length(res), 16)
    expect_equal(res[0], 1, tolerance = 1e-5)

    ggml_free(ctx)


def test_ggml_upscale_bilinear_produces_interpolated_non_replicated_values():
    """ggml_upscale bilinear produces interpolated (non-replicated) values"""
    ctx = ggml_init(16 * 1024 * 1024)
    a = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, 2, 2, 1, 1)
    ggml_set_f32(a, c(0, 4, 8, 12))

    up = ggml_upscale(ctx, a, 2, GGML_SCALE_MODE_BILINEAR)
    graph = ggml_build_forward_expand(ctx, up)
    ggml_graph_compute(ctx, graph)

    res = ggml_get_f32(up).ravel()
    expect_equal(length(res), 16)
    assert all(is_finite(res))
    assert not (all(np.isin(res, c(0, 4, 8, 12))))

    ggml_free(ctx)


def test_ggml_upscale_bicubic_0_11_0_new_mode_runs_and_is_finite():
    """ggml_upscale bicubic (0.11.0 new mode) runs and is finite"""
    ctx = ggml_init(16 * 1024 * 1024)
    a = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, 4, 4, 1, 1)
    ggml_set_f32(a, as_numeric(rng(1, 16)))

    up = ggml_upscale(ctx, a, 2, GGML_SCALE_MODE_BICUBIC)
    graph = ggml_build_forward_expand(ctx, up)
    ggml_graph_compute(ctx, graph)

    shape = ggml_tensor_shape(up)
    expect_equal(shape[0], 8)
    expect_equal(shape[1], 8)
    res = ggml_get_f32(up).ravel()
    expect_equal(length(res), 64)
    assert all(is_finite(res))

    ggml_free(ctx)


def test_ggml_upscale_default_mode_equals_explicit_nearest():
    """ggml_upscale default mode equals explicit nearest"""
    ctx = ggml_init(16 * 1024 * 1024)
    a = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, 2, 2, 1, 1)
    ggml_set_f32(a, c(5, 6, 7, 8))

    up_default = ggml_upscale(ctx, a, 2)
    g1 = ggml_build_forward_expand(ctx, up_default)
    ggml_graph_compute(ctx, g1)
    res_default = ggml_get_f32(up_default).ravel()

    up_nearest = ggml_upscale(ctx, a, 2, GGML_SCALE_MODE_NEAREST)
    g2 = ggml_build_forward_expand(ctx, up_nearest)
    ggml_graph_compute(ctx, g2)
    res_nearest = ggml_get_f32(up_nearest).ravel()

    expect_equal(res_default, res_nearest, tolerance = 1e-6)

    ggml_free(ctx)

