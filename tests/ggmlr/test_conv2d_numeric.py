"""Port of ggmlR's tests/testthat/test-conv2d-numeric.R (ggmlR 0.8.2): upstream ggml's
test-conv2d.cpp values (f16 kernel of 2.5, f32 input of 1.5, padding 1)."""
import pytest

from ggmlpy import *  # noqa: F401,F403

from .rlike import *  # noqa: F401,F403

KW, KH, IC, OC = 3, 3, 10, 10
IW, IH, N = 8, 6, 1

# corner: 4 taps, edge: 6, interior: 9; each tap 2.5 * 1.5 * IC
expected_row_edge = c(150, 225, 225, 225, 225, 225, 225, 150)
expected_row_interior = c(225, 337.5, 337.5, 337.5, 337.5, 337.5, 337.5, 225)
expected_map = c(expected_row_edge, rep(expected_row_interior, 4), expected_row_edge)
expected_conv2d = rep(expected_map, OC)


def run_conv2d(backend):
    ctx = ggml_init(64 * 1024 * 1024)
    ggml_set_no_alloc(ctx, True)
    a = ggml_new_tensor_4d(ctx, GGML_TYPE_F16, KW, KH, IC, OC)
    b = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, IW, IH, IC, N)
    im = ggml_im2col(ctx, a, b, 1, 1, 1, 1, 1, 1, is_2D=True, dst_type=GGML_TYPE_F16)
    r = ggml_conv_2d(ctx, a, b, 1, 1, 1, 1, 1, 1)

    ggml_backend_alloc_ctx_tensors(ctx, backend)
    ggml_backend_tensor_set_data(a, rep(2.5, KW * KH * IC * OC))
    ggml_backend_tensor_set_data(b, rep(1.5, IW * IH * IC * N))

    gf = ggml_build_forward_expand(ctx, r)
    ggml_backend_graph_compute(backend, gf)
    return {"conv": ggml_backend_tensor_get_data(r), "im_len": ggml_nelements(im)}


def test_conv2d_produces_upstream_reference_values_cpu():
    """conv2d produces upstream reference values (CPU)"""
    backend = ggml_backend_cpu_init()
    ggml_backend_cpu_set_n_threads(backend, 2)
    res = run_conv2d(backend)
    assert length(res["conv"]) == OC * IW * IH
    expect_equal(res["im_len"], 4320)
    expect_equal(res["conv"], expected_conv2d, tolerance=1e-2)


def test_conv2d_matches_between_cpu_and_vulkan():
    """conv2d matches between CPU and Vulkan"""
    if not ggml_vulkan_available():
        pytest.skip("Vulkan GPU not available")
    cpu = ggml_backend_cpu_init()
    ggml_backend_cpu_set_n_threads(cpu, 2)
    cpu_res = run_conv2d(cpu)
    ggml_backend_free(cpu)
    gpu = ggml_vulkan_init(0)
    gpu_res = run_conv2d(gpu)
    expect_equal(gpu_res["conv"], cpu_res["conv"], tolerance=1e-2)
