"""Port of ggmlR's tests/testthat/test-conv-transpose-numeric.R (ggmlR 0.8.2): upstream ggml's
test-conv-transpose.c values (data 0, 1, 2, ... and an f16 kernel 0, 1, 2, ...)."""
from ggmlpy import *  # noqa: F401,F403

from .rlike import *  # noqa: F401,F403


def cpu_backend():
    b = ggml_backend_cpu_init()
    ggml_backend_cpu_set_n_threads(b, 2)
    return b


def run_ct1d(stride):
    """t: [L=3, Cin=2] f32 = 0..5; k: [K=2, Cout=3, Cin=2] f16 = 0..11."""
    ctx = ggml_init(8 * 1024 * 1024)
    ggml_set_no_alloc(ctx, True)
    t = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 3, 2)
    k = ggml_new_tensor_3d(ctx, GGML_TYPE_F16, 2, 3, 2)
    r = ggml_conv_transpose_1d(ctx, k, t, int(stride), 0, 1)
    be = cpu_backend()
    ggml_backend_alloc_ctx_tensors(ctx, be)
    ggml_backend_tensor_set_data(t, as_numeric(rng(0, 5)))
    ggml_backend_tensor_set_data(k, as_numeric(rng(0, 11)))
    gf = ggml_build_forward_expand(ctx, r)
    ggml_backend_graph_compute(be, gf)
    return ggml_backend_tensor_get_data(r)


def test_conv_transpose_1d_matches_upstream_values_stride_1():
    """conv_transpose_1d matches upstream values (stride 1)"""
    expect_equal(run_ct1d(1), c(18, 45, 59, 37, 24, 61, 83, 51, 30, 77, 107, 65), tolerance=1e-3)


def test_conv_transpose_1d_matches_upstream_values_stride_2():
    """conv_transpose_1d matches upstream values (stride 2)"""
    expect_equal(run_ct1d(2), c(18, 21, 24, 29, 30, 37, 24, 27, 34, 39, 44, 51, 30, 33, 44, 49, 58, 65),
                 tolerance=1e-3)


def test_conv_transpose_1d_matches_upstream_values_stride_3():
    """conv_transpose_1d matches upstream values (stride 3)"""
    expect_equal(run_ct1d(3), c(18, 21, 0, 24, 29, 0, 30, 37, 24, 27, 0, 34, 39, 0, 44, 51,
                                30, 33, 0, 44, 49, 0, 58, 65), tolerance=1e-3)


def run_ct2d(stride):
    """t: [w=3, h=2, cin=2, N=1] f32 = 0..11; k: [w=2, h=2, cout=3, cin=2] f16 = 0..23."""
    ctx = ggml_init(8 * 1024 * 1024)
    ggml_set_no_alloc(ctx, True)
    t = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, 3, 2, 2, 1)
    k = ggml_new_tensor_4d(ctx, GGML_TYPE_F16, 2, 2, 3, 2)
    r = ggml_conv_transpose_2d_p0(ctx, k, t, int(stride))
    be = cpu_backend()
    ggml_backend_alloc_ctx_tensors(ctx, be)
    ggml_backend_tensor_set_data(t, as_numeric(rng(0, 11)))
    ggml_backend_tensor_set_data(k, as_numeric(rng(0, 23)))
    gf = ggml_build_forward_expand(ctx, r)
    ggml_backend_graph_compute(be, gf)
    return ggml_backend_tensor_get_data(r)


def test_conv_transpose_2d_p0_matches_upstream_values_stride_1():
    """conv_transpose_2d_p0 matches upstream values (stride 1)"""
    expected = c(72, 162, 188, 106, 192, 430, 490, 274, 132, 292, 326, 180,
                 96, 218, 260, 146, 264, 590, 682, 378, 180, 396, 446, 244,
                 120, 274, 332, 186, 336, 750, 874, 482, 228, 500, 566, 308)
    expect_equal(run_ct2d(1), expected, tolerance=1e-3)


def test_conv_transpose_2d_p0_output_shapes_are_correct_strides_2_3():
    """conv_transpose_2d_p0 output shapes are correct (strides 2, 3)"""
    assert length(run_ct2d(2)) == 72
    assert length(run_ct2d(3)) == 120
