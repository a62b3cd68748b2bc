"""Port of ggmlR's tests/testthat/test-matrix-ops.R (ggmlR 0.8.2)."""
import numpy as np  # noqa: F401
import pytest  # noqa: F401

from ggmlpy import *  # noqa: F401,F403
from ggmlpy import GGMLError  # noqa: F401

from .rlike import *  # noqa: F401,F403


def test_ggml_out_prod_computes_outer_product():
    """ggml_out_prod computes outer product"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 3)
    b = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    ggml_set_f32(a, c(1, 2, 3))
    ggml_set_f32(b, c(1, 2, 3, 4))

    result = ggml_out_prod(ctx, a, b)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    assert length(output) == 12

    expected = as_vector(outer(c(1, 2, 3), c(1, 2, 3, 4)))
    expect_equal(output, expected, tolerance = 1e-5)


def test_ggml_out_prod_with_single_elements():
    """ggml_out_prod with single elements"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 1)
    b = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 1)
    ggml_set_f32(a, 3)
    ggml_set_f32(b, 4)

    result = ggml_out_prod(ctx, a, b)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    expect_equal(output, 12, tolerance = 1e-5)


def test_ggml_diag_creates_diagonal_matrix():
    """ggml_diag creates diagonal matrix"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 3)
    ggml_set_f32(a, c(1, 2, 3))

    result = ggml_diag(ctx, a)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    assert length(output) == 9

    expected = c(1, 0, 0, 0, 2, 0, 0, 0, 3)
    expect_equal(output, expected, tolerance = 1e-5)


def test_ggml_diag_with_zeros():
    """ggml_diag with zeros"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 2)
    ggml_set_f32(a, c(0, 0))

    result = ggml_diag(ctx, a)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    expect_equal(output, rep(0, 4), tolerance = 1e-5)


def test_ggml_concat_along_dimension_0():
    """ggml_concat along dimension 0"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 2, 3)
    b = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 2, 3)
    ggml_set_f32(a, as_numeric(rng(1, 6)))
    ggml_set_f32(b, as_numeric(rng(7, 12)))

    result = ggml_concat(ctx, a, b, dim = 0)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    shape = ggml_tensor_shape(result)
    expect_equal(shape[0], 4)
    expect_equal(shape[1], 3)


def test_ggml_concat_along_dimension_1():
    """ggml_concat along dimension 1"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 4, 2)
    b = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 4, 3)
    ggml_set_f32(a, rnorm(8))
    ggml_set_f32(b, rnorm(12))

    result = ggml_concat(ctx, a, b, dim = 1)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    shape = ggml_tensor_shape(result)
    expect_equal(shape[0], 4)
    expect_equal(shape[1], 5)


def test_ggml_get_rows_extracts_rows_by_index():
    """ggml_get_rows extracts rows by index"""
    ctx = ggml_init(16 * 1024 * 1024)

    embeddings = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 3, 4)
    ggml_set_f32(embeddings, c(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12))

    indices = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, 2)
    ggml_set_i32(indices, c(0, 2))

    result = ggml_get_rows(ctx, embeddings, indices)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    assert length(output) == 6
    expect_equal(output, c(1, 2, 3, 7, 8, 9), tolerance = 1e-5)


def test_ggml_get_rows_with_single_index():
    """ggml_get_rows with single index"""
    ctx = ggml_init(16 * 1024 * 1024)

    embeddings = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 4, 5)
    ggml_set_f32(embeddings, as_numeric(rng(1, 20)))

    indices = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, 1)
    ggml_set_i32(indices, 3)

    result = ggml_get_rows(ctx, embeddings, indices)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    assert length(output) == 4
    expect_equal(output, c(13, 14, 15, 16), tolerance = 1e-5)


def test_ggml_get_rows_with_repeated_indices():
    """ggml_get_rows with repeated indices"""
    ctx = ggml_init(16 * 1024 * 1024)

    embeddings = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 2, 3)
    ggml_set_f32(embeddings, c(1, 2, 3, 4, 5, 6))

    indices = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, 3)
    ggml_set_i32(indices, c(0, 0, 1))

    result = ggml_get_rows(ctx, embeddings, indices)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    assert length(output) == 6
    expect_equal(output, c(1, 2, 1, 2, 3, 4), tolerance = 1e-5)


def test_ggml_transpose_transposes_2d_matrix():
    """ggml_transpose transposes 2D matrix"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 3, 2)
    ggml_set_f32(a, as_numeric(rng(1, 6)))

    result = ggml_transpose(ctx, a)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    shape = ggml_tensor_shape(result)
    expect_equal(shape[0], 2)
    expect_equal(shape[1], 3)


def test_double_transpose_returns_original_shape():
    """double transpose returns original shape"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 4, 5)

    t1 = ggml_transpose(ctx, a)
    t2 = ggml_transpose(ctx, t1)

    shape = ggml_tensor_shape(t2)
    expect_equal(shape[0], 4)
    expect_equal(shape[1], 5)


def test_ggml_mul_mat_computes_matrix_multiplication():
    """ggml_mul_mat computes matrix multiplication"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 4, 3)
    b = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 4, 2)
    ggml_set_f32(a, rep(1, 12))
    ggml_set_f32(b, rep(1, 8))

    result = ggml_mul_mat(ctx, a, b)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    assert length(output) == 6
    expect_equal(output, rep(4, 6), tolerance = 1e-5)


def test_ggml_mul_mat_with_identity_like_matrix():
    """ggml_mul_mat with identity-like matrix"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 2, 2)
    b = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 2, 3)
    ggml_set_f32(a, c(1, 0, 0, 1))
    ggml_set_f32(b, c(1, 2, 3, 4, 5, 6))

    result = ggml_mul_mat(ctx, a, b)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    assert length(output) == 6


def test_ggml_cpy_copies_tensor_data():
    """ggml_cpy copies tensor data"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    b = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5)
    ggml_set_f32(a, c(1, 2, 3, 4, 5))

    result = ggml_cpy(ctx, a, b)
    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    output = ggml_get_f32(result).ravel()
    expect_equal(output, c(1, 2, 3, 4, 5), tolerance = 1e-5)

