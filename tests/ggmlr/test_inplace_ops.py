"""Port of ggmlR's tests/testthat/test-inplace-ops.R (ggmlR 0.8.2)."""
import numpy as np  # noqa: F401
import pytest  # noqa: F401

from ggmlpy import *  # noqa: F401,F403
from ggmlpy import GGMLError  # noqa: F401

from .rlike import *  # noqa: F401,F403


def test_ggml_abs_inplace_computes_absolute_value():
    """ggml_abs_inplace computes absolute value"""
    ctx = ggml_init(1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    ggml_set_f32(a, c(-1, 2, -3, 4))
    ggml_set_input(a)

    r = ggml_abs_inplace(ctx, a)
    ggml_set_output(r)

    backend = ggml_backend_cpu_init()
    ggml_backend_cpu_set_n_threads(backend, 2)

    graph = ggml_build_forward_expand(ctx, r)
    ggml_backend_graph_compute(backend, graph)
    result = ggml_get_f32(r).ravel()
    expect_equal(result, c(1, 2, 3, 4), tolerance = 1e-5)

# ggmlR's helper test_inplace_op() makes one test_that block per op: here one parametrized case each.
_UNARY_CASES = [
    ("ggml_neg_inplace", c(1, -2, 3, -4), c(-1, 2, -3, 4)),
    ("ggml_sqr_inplace", c(1, 2, 3, 4), c(1, 4, 9, 16)),
    ("ggml_sqrt_inplace", c(1, 4, 9, 16), c(1, 2, 3, 4)),
    ("ggml_relu_inplace", c(-1, 0, 1, 2), c(0, 0, 1, 2)),
    ("ggml_sigmoid_inplace", c(0, 0, 0, 0), c(0.5, 0.5, 0.5, 0.5)),
    ("ggml_tanh_inplace", c(0, 0, 0, 0), c(0, 0, 0, 0)),
    ("ggml_exp_inplace", c(0, 1, 0, 0), c(1, exp(1), 1, 1)),
    ("ggml_silu_inplace", c(0, 0, 0, 0), c(0, 0, 0, 0)),
    ("ggml_gelu_inplace", c(0, 0, 0, 0), c(0, 0, 0, 0)),
    ("ggml_ceil_inplace", c(1.1, 2.5, -0.1, 3.0), c(2, 3, 0, 3)),
    ("ggml_floor_inplace", c(1.1, 2.5, -0.1, 3.0), c(1, 2, -1, 3)),
    ("ggml_round_inplace", c(1.1, 2.5, 2.6, 3.0), c(1, 3, 3, 3)),
    ("ggml_log_inplace", c(1, exp(1), exp(2), exp(3)), c(0, 1, 2, 3)),
]


@pytest.mark.parametrize("op_name,input,expected", _UNARY_CASES, ids=[x[0] for x in _UNARY_CASES])
def test_inplace_op_works(op_name, input, expected, tol=1e-4):
    """<op_name> works (ggmlR's test_inplace_op helper)"""
    import ggmlpy
    op_fn = getattr(ggmlpy, op_name)
    ctx = ggml_init(1024 * 1024)
    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, length(input))
    ggml_set_f32(a, input)
    ggml_set_input(a)

    r = op_fn(ctx, a)
    ggml_set_output(r)

    backend = ggml_backend_cpu_init()
    ggml_backend_cpu_set_n_threads(backend, 2)

    graph = ggml_build_forward_expand(ctx, r)
    ggml_backend_graph_compute(backend, graph)
    result = ggml_get_f32(r).ravel()
    expect_equal(result, expected, tolerance = tol)
    # in place: the input's own memory holds the result
    expect_equal(ggml_get_f32(a).ravel(), expected, tolerance = tol)


def test_ggml_mul_inplace_works():
    """ggml_mul_inplace works"""
    ctx = ggml_init(1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    b = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    ggml_set_f32(a, c(1, 2, 3, 4))
    ggml_set_f32(b, c(2, 3, 4, 5))
    ggml_set_input(a)
    ggml_set_input(b)

    r = ggml_mul_inplace(ctx, a, b)
    ggml_set_output(r)

    backend = ggml_backend_cpu_init()
    ggml_backend_cpu_set_n_threads(backend, 2)

    graph = ggml_build_forward_expand(ctx, r)
    ggml_backend_graph_compute(backend, graph)
    result = ggml_get_f32(r).ravel()
    expect_equal(result, c(2, 6, 12, 20), tolerance = 1e-5)


def test_ggml_div_inplace_works():
    """ggml_div_inplace works"""
    ctx = ggml_init(1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    b = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    ggml_set_f32(a, c(10, 20, 30, 40))
    ggml_set_f32(b, c(2, 4, 5, 8))
    ggml_set_input(a)
    ggml_set_input(b)

    r = ggml_div_inplace(ctx, a, b)
    ggml_set_output(r)

    backend = ggml_backend_cpu_init()
    ggml_backend_cpu_set_n_threads(backend, 2)

    graph = ggml_build_forward_expand(ctx, r)
    ggml_backend_graph_compute(backend, graph)
    result = ggml_get_f32(r).ravel()
    expect_equal(result, c(5, 5, 6, 5), tolerance = 1e-5)


def test_ggml_sub_inplace_works():
    """ggml_sub_inplace works"""
    ctx = ggml_init(1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    b = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    ggml_set_f32(a, c(10, 20, 30, 40))
    ggml_set_f32(b, c(1, 2, 3, 4))
    ggml_set_input(a)
    ggml_set_input(b)

    r = ggml_sub_inplace(ctx, a, b)
    ggml_set_output(r)

    backend = ggml_backend_cpu_init()
    ggml_backend_cpu_set_n_threads(backend, 2)

    graph = ggml_build_forward_expand(ctx, r)
    ggml_backend_graph_compute(backend, graph)
    result = ggml_get_f32(r).ravel()
    expect_equal(result, c(9, 18, 27, 36), tolerance = 1e-5)


def test_ggml_dup_inplace_works():
    """ggml_dup_inplace works"""
    ctx = ggml_init(1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    ggml_set_f32(a, c(1, 2, 3, 4))
    ggml_set_input(a)

    r = ggml_dup_inplace(ctx, a)
    ggml_set_output(r)

    backend = ggml_backend_cpu_init()
    ggml_backend_cpu_set_n_threads(backend, 2)

    graph = ggml_build_forward_expand(ctx, r)
    ggml_backend_graph_compute(backend, graph)
    result = ggml_get_f32(r).ravel()
    expect_equal(result, c(1, 2, 3, 4), tolerance = 1e-5)


def test_ggml_scale_inplace_works():
    """ggml_scale_inplace works"""
    ctx = ggml_init(1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    ggml_set_f32(a, c(1, 2, 3, 4))
    ggml_set_input(a)

    r = ggml_scale_inplace(ctx, a, 3.0)
    ggml_set_output(r)

    backend = ggml_backend_cpu_init()
    ggml_backend_cpu_set_n_threads(backend, 2)

    graph = ggml_build_forward_expand(ctx, r)
    ggml_backend_graph_compute(backend, graph)
    result = ggml_get_f32(r).ravel()
    expect_equal(result, c(3, 6, 9, 12), tolerance = 1e-5)


def test_ggml_soft_max_inplace_works():
    """ggml_soft_max_inplace works"""
    ctx = ggml_init(1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    ggml_set_f32(a, c(1, 2, 3, 4))
    ggml_set_input(a)

    r = ggml_soft_max_inplace(ctx, a)
    ggml_set_output(r)

    backend = ggml_backend_cpu_init()
    ggml_backend_cpu_set_n_threads(backend, 2)

    graph = ggml_build_forward_expand(ctx, r)
    ggml_backend_graph_compute(backend, graph)
    result = ggml_get_f32(r).ravel()
    expect_equal(sum(result), 1.0, tolerance = 1e-5)
    assert all(diff(result) > 0)


def test_ggml_elu_inplace_works():
    """ggml_elu_inplace works"""
    ctx = ggml_init(1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    ggml_set_f32(a, c(-1, 0, 1, 2))
    ggml_set_input(a)

    r = ggml_elu_inplace(ctx, a)
    ggml_set_output(r)

    backend = ggml_backend_cpu_init()
    ggml_backend_cpu_set_n_threads(backend, 2)

    graph = ggml_build_forward_expand(ctx, r)
    ggml_backend_graph_compute(backend, graph)
    result = ggml_get_f32(r).ravel()
    expect_equal(result[1], 0.0, tolerance = 1e-5)
    expect_equal(result[2], 1.0, tolerance = 1e-5)
    assert result[0] < 0


def test_ggml_softplus_inplace_works():
    """ggml_softplus_inplace works"""
    ctx = ggml_init(1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    ggml_set_f32(a, c(0, 1, 2, 3))
    ggml_set_input(a)

    r = ggml_softplus_inplace(ctx, a)
    ggml_set_output(r)

    backend = ggml_backend_cpu_init()
    ggml_backend_cpu_set_n_threads(backend, 2)

    graph = ggml_build_forward_expand(ctx, r)
    ggml_backend_graph_compute(backend, graph)
    result = ggml_get_f32(r).ravel()
    expected = log(1 + exp(c(0, 1, 2, 3)))
    expect_equal(result, expected, tolerance = 1e-4)


def test_ggml_diag_mask_inf_inplace_works():
    """ggml_diag_mask_inf_inplace works"""
    ctx = ggml_init(1024 * 1024)

    a = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 3, 3)
    ggml_set_f32(a, rep(1.0, 9))
    ggml_set_input(a)

    r = ggml_diag_mask_inf_inplace(ctx, a, 0)
    ggml_set_output(r)

    backend = ggml_backend_cpu_init()
    ggml_backend_cpu_set_n_threads(backend, 2)

    graph = ggml_build_forward_expand(ctx, r)
    ggml_backend_graph_compute(backend, graph)
    result = ggml_get_f32(r).ravel()
    expect_equal(result[0], 1.0, tolerance = 1e-5)
    assert is_infinite(result[1])  and  result[1] < 0


def test_ggml_norm_inplace_works():
    """ggml_norm_inplace works"""
    ctx = ggml_init(1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    ggml_set_f32(a, c(1, 2, 3, 4))
    ggml_set_input(a)

    r = ggml_norm_inplace(ctx, a, 1e-5)
    ggml_set_output(r)

    backend = ggml_backend_cpu_init()
    ggml_backend_cpu_set_n_threads(backend, 2)

    graph = ggml_build_forward_expand(ctx, r)
    ggml_backend_graph_compute(backend, graph)
    result = ggml_get_f32(r).ravel()
    expect_equal(mean(result), 0.0, tolerance = 1e-4)


def test_ggml_rms_norm_inplace_works():
    """ggml_rms_norm_inplace works"""
    ctx = ggml_init(1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    ggml_set_f32(a, c(1, 2, 3, 4))
    ggml_set_input(a)

    r = ggml_rms_norm_inplace(ctx, a, 1e-5)
    ggml_set_output(r)

    backend = ggml_backend_cpu_init()
    ggml_backend_cpu_set_n_threads(backend, 2)

    graph = ggml_build_forward_expand(ctx, r)
    ggml_backend_graph_compute(backend, graph)
    result = ggml_get_f32(r).ravel()
    expect_equal(sqrt(mean(result**2)), 1.0, tolerance = 1e-3)


def test_ggml_l2_norm_inplace_works():
    """ggml_l2_norm_inplace works"""
    ctx = ggml_init(1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    ggml_set_f32(a, c(3, 0, 4, 0))
    ggml_set_input(a)

    r = ggml_l2_norm_inplace(ctx, a, 1e-5)
    ggml_set_output(r)

    backend = ggml_backend_cpu_init()
    ggml_backend_cpu_set_n_threads(backend, 2)

    graph = ggml_build_forward_expand(ctx, r)
    ggml_backend_graph_compute(backend, graph)
    result = ggml_get_f32(r).ravel()
    expect_equal(sqrt(sum(result**2)), 1.0, tolerance = 1e-4)


def test_ggml_rope_inplace_works():
    """ggml_rope_inplace works"""
    ctx = ggml_init(1024 * 1024)

    a = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, 4, 2, 1)
    ggml_set_f32(a, rep(1.0, 8))
    ggml_set_input(a)

    pos = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, 1)
    ggml_set_i32(pos, 0)
    ggml_set_input(pos)

    r = ggml_rope_inplace(ctx, a, pos, n_dims = 4, mode = 0)
    ggml_set_output(r)

    backend = ggml_backend_cpu_init()
    ggml_backend_cpu_set_n_threads(backend, 2)

    graph = ggml_build_forward_expand(ctx, r)
    ggml_backend_graph_compute(backend, graph)
    result = ggml_get_f32(r).ravel()
    assert length(result) == 8
    expect_equal(result[0:4], rep(1.0, 4), tolerance = 1e-4)

