"""Port of ggmlR's tests/testthat/test-new-ops-numeric.R (ggmlR 0.8.2)."""
import numpy as np  # noqa: F401
import pytest  # noqa: F401

from ggmlpy import *  # noqa: F401,F403
from ggmlpy import GGMLError  # noqa: F401

from .rlike import *  # noqa: F401,F403



def compute_f32(ctx, out):
    be = ggml_backend_cpu_init()
    ggml_backend_cpu_set_n_threads(be, 2)
    g = ggml_build_forward_expand(ctx, out)
    ggml_backend_graph_compute(be, g)
    return ggml_get_f32(out).ravel()


def test_arange_produces_start_stop_with_step():
    """arange produces [start, stop) with step"""
    ctx = ggml_init(1024 * 1024)
    expect_equal(compute_f32(ctx, ggml_arange(ctx, 0, 5, 1)), c(0, 1, 2, 3, 4))


def test_arange_honours_non_unit_step():
    """arange honours non-unit step"""
    ctx = ggml_init(1024 * 1024)
    expect_equal(compute_f32(ctx, ggml_arange(ctx, 2, 10, 2)), c(2, 4, 6, 8))


def test_roll_circularly_shifts_along_dim_0():
    """roll circularly shifts along dim 0"""
    ctx = ggml_init(1024 * 1024)
    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    ggml_set_f32(a, c(1, 2, 3, 4, 5)); ggml_set_input(a)
    expect_equal(compute_f32(ctx, ggml_roll(ctx, a, 1, 0, 0, 0)),
                 c(5, 1, 2, 3, 4))


def test_roll_handles_negative_shift():
    """roll handles negative shift"""
    ctx = ggml_init(1024 * 1024)
    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    ggml_set_f32(a, c(1, 2, 3, 4, 5)); ggml_set_input(a)
    expect_equal(compute_f32(ctx, ggml_roll(ctx, a, -1, 0, 0, 0)),
                 c(2, 3, 4, 5, 1))


def test_pad_reflect_1d_reflects_without_repeating_the_edge():
    """pad_reflect_1d reflects without repeating the edge"""
    ctx = ggml_init(1024 * 1024)
    a = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 4, 1)
    ggml_set_f32(a, c(1, 2, 3, 4)); ggml_set_input(a)
    expect_equal(compute_f32(ctx, ggml_pad_reflect_1d(ctx, a, 2, 2)),
                 c(3, 2, 1, 2, 3, 4, 3, 2))


def test_win_part_then_win_unpart_reconstructs_the_input():
    """win_part then win_unpart reconstructs the input"""
    ctx = ggml_init(8 * 1024 * 1024)
    a = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, 2, 4, 4, 1)
    vals = as_numeric(rng(1, 32))
    ggml_set_f32(a, vals); ggml_set_input(a)

    wp = ggml_win_part(ctx, a, 2)
    expect_equal(ggml_tensor_shape(wp), c(2, 2, 2, 4))

    wu = ggml_win_unpart(ctx, wp, 4, 4, 2)
    expect_equal(ggml_tensor_shape(wu), c(2, 4, 4, 1))
    expect_equal(compute_f32(ctx, wu), vals)


def test_get_rel_pos_add_rel_pos_match_upstream_reference_values():
    """get_rel_pos + add_rel_pos match upstream reference values"""
    ctx = ggml_init(8 * 1024 * 1024)
    ggml_set_no_alloc(ctx, True)

    t  = ggml_new_tensor_2d(ctx, GGML_TYPE_F16, 3, 3)
    t2 = ggml_new_tensor_2d(ctx, GGML_TYPE_F16, 3, 3)
    rw  = ggml_get_rel_pos(ctx, t,  2, 2)
    rh  = ggml_get_rel_pos(ctx, t2, 2, 2)
    rwf = ggml_cpy(ctx, rw, ggml_new_tensor_3d(ctx, GGML_TYPE_F32, 3, 2, 2))
    rhf = ggml_cpy(ctx, rh, ggml_new_tensor_3d(ctx, GGML_TYPE_F32, 3, 2, 2))
    inp = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 9, 4)
    out = ggml_add_rel_pos(ctx, inp, rwf, rhf)

    be = ggml_backend_cpu_init()
    ggml_backend_cpu_set_n_threads(be, 2)
    ggml_backend_alloc_ctx_tensors(ctx, be)

    ggml_backend_tensor_set_data(t,  as_numeric(rng(0, 8)))
    ggml_backend_tensor_set_data(t2, as_numeric(rng(1, 9)))
    ggml_backend_tensor_set_data(inp, rep(1, 36))

    gf = ggml_build_forward_expand(ctx, out)
    ggml_backend_graph_compute(be, gf)
    v = ggml_backend_tensor_get_data(out)

    expected = c(
      8, 9, 10, 9, 10, 11, 10, 11, 12,
      2, 3,  4, 3,  4,  5,  4,  5,  6,
      14, 15, 16, 15, 16, 17, 16, 17, 18,
      8, 9, 10, 9, 10, 11, 10, 11, 12)
    expect_equal(v, expected, tolerance = 1e-4)

