"""Port of ggmlR's tests/testthat/test-glu.R (ggmlR 0.8.2)."""
import numpy as np  # noqa: F401
import pytest  # noqa: F401

from ggmlpy import *  # noqa: F401,F403
from ggmlpy import GGMLError  # noqa: F401

from .rlike import *  # noqa: F401,F403


def test_glu_constants_are_defined_correctly():
    """GLU constants are defined correctly"""
    expect_equal(GGML_GLU_OP_REGLU, 0)
    expect_equal(GGML_GLU_OP_GEGLU, 1)
    expect_equal(GGML_GLU_OP_SWIGLU, 2)
    expect_equal(GGML_GLU_OP_SWIGLU_OAI, 3)
    expect_equal(GGML_GLU_OP_GEGLU_ERF, 4)
    expect_equal(GGML_GLU_OP_GEGLU_QUICK, 5)


def test_reglu_computes_correctly_for_1d_input():
    """reglu computes correctly for 1D input"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    ggml_set_f32(a, c(-2, 3, 1, 2))

    r = ggml_reglu(ctx, a)
    graph = ggml_build_forward_expand(ctx, r)
    ggml_graph_compute(ctx, graph)

    result = ggml_get_f32(r).ravel()

    expect_equal(result, c(0, 6), tolerance = 1e-5)

    ggml_free(ctx)


def test_geglu_computes_correctly_for_1d_input():
    """geglu computes correctly for 1D input"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    ggml_set_f32(a, c(1, 1, 0, 2))

    r = ggml_geglu(ctx, a)
    graph = ggml_build_forward_expand(ctx, r)
    ggml_graph_compute(ctx, graph)

    result = ggml_get_f32(r).ravel()

    expect_equal(result[0], 0, tolerance = 1e-4)
    assert result[1] > 0

    ggml_free(ctx)


def test_swiglu_computes_correctly_for_1d_input():
    """swiglu computes correctly for 1D input"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    ggml_set_f32(a, c(1, 1, 0, 2))

    r = ggml_swiglu(ctx, a)
    graph = ggml_build_forward_expand(ctx, r)
    ggml_graph_compute(ctx, graph)

    result = ggml_get_f32(r).ravel()

    expect_equal(result[0], 0, tolerance = 1e-5)
    assert result[1] > 0

    ggml_free(ctx)


def test_glu_generic_function_works_with_different_ops():
    """glu generic function works with different ops"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    ggml_set_f32(a, c(1, 1, 0, 2))

    r = ggml_glu(ctx, a, GGML_GLU_OP_SWIGLU, False)
    graph = ggml_build_forward_expand(ctx, r)
    ggml_graph_compute(ctx, graph)

    result = ggml_get_f32(r).ravel()
    expect_equal(length(result), 2)
    expect_equal(result[0], 0, tolerance = 1e-5)

    ggml_free(ctx)


def test_reglu_split_computes_correctly():
    """reglu_split computes correctly"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 3)
    b = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 3)
    ggml_set_f32(a, c(-1, 2, 3))
    ggml_set_f32(b, c(1, 2, 2))

    r = ggml_reglu_split(ctx, a, b)
    graph = ggml_build_forward_expand(ctx, r)
    ggml_graph_compute(ctx, graph)

    result = ggml_get_f32(r).ravel()

    expect_equal(result, c(0, 4, 6), tolerance = 1e-5)

    ggml_free(ctx)


def test_geglu_split_computes_correctly():
    """geglu_split computes correctly"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 2)
    b = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 2)
    ggml_set_f32(a, c(1, 1))
    ggml_set_f32(b, c(0, 2))

    r = ggml_geglu_split(ctx, a, b)
    graph = ggml_build_forward_expand(ctx, r)
    ggml_graph_compute(ctx, graph)

    result = ggml_get_f32(r).ravel()

    expect_equal(result[0], 0, tolerance = 1e-4)
    assert result[1] > 0

    ggml_free(ctx)


def test_swiglu_split_computes_correctly():
    """swiglu_split computes correctly"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 2)
    b = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 2)
    ggml_set_f32(a, c(1, 1))
    ggml_set_f32(b, c(0, 2))

    r = ggml_swiglu_split(ctx, a, b)
    graph = ggml_build_forward_expand(ctx, r)
    ggml_graph_compute(ctx, graph)

    result = ggml_get_f32(r).ravel()

    expect_equal(result[0], 0, tolerance = 1e-5)
    assert result[1] > 0

    ggml_free(ctx)


def test_glu_split_generic_function_works():
    """glu_split generic function works"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 3)
    b = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 3)
    ggml_set_f32(a, c(-1, 2, 3))
    ggml_set_f32(b, c(1, 2, 2))

    r = ggml_glu_split(ctx, a, b, GGML_GLU_OP_REGLU)
    graph = ggml_build_forward_expand(ctx, r)
    ggml_graph_compute(ctx, graph)

    result = ggml_get_f32(r).ravel()
    expect_equal(result, c(0, 4, 6), tolerance = 1e-5)

    ggml_free(ctx)


def test_glu_works_with_2d_tensors():
    """GLU works with 2D tensors"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 4, 3)
    ggml_set_f32(a, c(
      1, 2, 1, 1,
      3, 4, 2, 0,
      5, 6, -1, 1
    ))

    r = ggml_reglu(ctx, a)
    graph = ggml_build_forward_expand(ctx, r)
    ggml_graph_compute(ctx, graph)

    result = ggml_get_f32(r).ravel()

    expect_equal(length(result), 6)

    ggml_free(ctx)


def test_geglu_quick_produces_similar_results_to_geglu():
    """geglu_quick produces similar results to geglu"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    ggml_set_f32(a, c(1, 2, 1, 2))

    g = ggml_geglu(ctx, a)
    graph = ggml_build_forward_expand(ctx, g)
    ggml_graph_compute(ctx, graph)
    geglu_result = ggml_get_f32(g).ravel()

    ggml_reset(ctx)

    a2 = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    ggml_set_f32(a2, c(1, 2, 1, 2))

    gq = ggml_geglu_quick(ctx, a2)
    graph2 = ggml_build_forward_expand(ctx, gq)
    ggml_graph_compute(ctx, graph2)
    quick_result = ggml_get_f32(gq).ravel()

    expect_equal(quick_result, geglu_result, tolerance = 0.1)

    ggml_free(ctx)


def test_glu_output_shape_is_correct():
    """GLU output shape is correct"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 8)
    ggml_set_f32(a, rng(1, 8))

    r = ggml_swiglu(ctx, a)
    shape = ggml_tensor_shape(r)

    expect_equal(shape[0], 4)

    ggml_free(ctx)


def test_glu_split_output_shape_matches_input():
    """GLU split output shape matches input"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 5, 3)
    b = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 5, 3)
    ggml_set_f32(a, rnorm(15))
    ggml_set_f32(b, rnorm(15))

    r = ggml_swiglu_split(ctx, a, b)
    shape = ggml_tensor_shape(r)

    expect_equal(shape[0], 5)
    expect_equal(shape[1], 3)

    ggml_free(ctx)

