"""Port of ggmlR's tests/testthat/test-transformer-ops.R (ggmlR 0.8.2)."""
import numpy as np  # noqa: F401
import pytest  # noqa: F401

from ggmlpy import *  # noqa: F401,F403
from ggmlpy import GGMLError  # noqa: F401

from .rlike import *  # noqa: F401,F403


def test_ggml_set_i32_and_ggml_get_i32_work_correctly():
    """ggml_set_i32 and ggml_get_i32 work correctly"""
    ctx = ggml_init(16 * 1024 * 1024)

    t = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, 5)

    ggml_set_i32(t, c(10, 20, 30, 40, 50))

    result = ggml_get_i32(t)

    expect_equal(result, c(10, 20, 30, 40, 50))


def test_ggml_get_rows_extracts_embeddings_by_indices():
    """ggml_get_rows extracts embeddings by indices"""
    ctx = ggml_init(32 * 1024 * 1024)

    embeddings = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 4, 10)

    data = as_numeric(rng(0, 39))
    ggml_set_f32(embeddings, data)

    indices = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, 3)
    ggml_set_i32(indices, c(0, 2, 5))

    result = ggml_get_rows(ctx, embeddings, indices)

    graph = ggml_build_forward_expand(ctx, result)
    ggml_graph_compute(ctx, graph)

    out = ggml_get_f32(result).ravel()

    expected = c(0, 1, 2, 3, 8, 9, 10, 11, 20, 21, 22, 23)
    expect_equal(out, expected)

    shape = ggml_tensor_shape(result)
    expect_equal(shape[0], 4)
    expect_equal(shape[1], 3)


def test_ggml_diag_mask_inf_creates_causal_mask():
    """ggml_diag_mask_inf creates causal mask"""
    ctx = ggml_init(32 * 1024 * 1024)

    m = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 4, 4)
    ggml_set_f32(m, rep(1.0, 16))

    masked = ggml_diag_mask_inf(ctx, m, 0)

    graph = ggml_build_forward_expand(ctx, masked)
    ggml_graph_compute(ctx, graph)

    out = ggml_get_f32(masked).ravel()
    out_mat = matrix(out, nrow = 4, ncol = 4, byrow = True)

    for i in rng(1, 4):
      for j in rng(1, 4):
        if j <= i:
          expect_equal(out_mat[i - 1, j - 1], 1.0)
        else:
          assert is_infinite(out_mat[i - 1, j - 1])  and  out_mat[i - 1, j - 1] < 0


def test_ggml_diag_mask_zero_creates_zero_mask():
    """ggml_diag_mask_zero creates zero mask"""
    ctx = ggml_init(32 * 1024 * 1024)

    m = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 3, 3)
    ggml_set_f32(m, rep(1.0, 9))

    masked = ggml_diag_mask_zero(ctx, m, 0)

    graph = ggml_build_forward_expand(ctx, masked)
    ggml_graph_compute(ctx, graph)

    out = ggml_get_f32(masked).ravel()
    out_mat = matrix(out, nrow = 3, ncol = 3, byrow = True)

    for i in rng(1, 3):
      for j in rng(1, 3):
        if j <= i:
          expect_equal(out_mat[i - 1, j - 1], 1.0)
        else:
          expect_equal(out_mat[i - 1, j - 1], 0.0)


def test_ggml_rope_applies_rotary_position_embedding():
    """ggml_rope applies rotary position embedding"""
    ctx = ggml_init(64 * 1024 * 1024)

    head_dim = 8
    n_head = 2
    seq_len = 4

    q = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, head_dim, n_head, seq_len, 1)

    n_elem = head_dim * n_head * seq_len
    ggml_set_f32(q, rep(1.0, n_elem))

    pos = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, seq_len)
    ggml_set_i32(pos, rng(0, seq_len - 1))

    q_rope = ggml_rope(ctx, q, pos, head_dim, GGML_ROPE_TYPE_NORM)

    graph = ggml_build_forward_expand(ctx, q_rope)
    ggml_graph_compute(ctx, graph)

    out = ggml_get_f32(q_rope).ravel()

    expect_equal(length(out), n_elem)

    assert sd(out) > 0

    shape = ggml_tensor_shape(q_rope)
    expect_equal(shape[0], head_dim)
    expect_equal(shape[1], n_head)
    expect_equal(shape[2], seq_len)


def test_ggml_rope_ext_works_with_frequency_scaling():
    """ggml_rope_ext works with frequency scaling"""
    ctx = ggml_init(64 * 1024 * 1024)

    head_dim = 8
    n_head = 2
    seq_len = 4

    q = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, head_dim, n_head, seq_len, 1)
    ggml_set_f32(q, rep(1.0, head_dim * n_head * seq_len))

    pos = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, seq_len)
    ggml_set_i32(pos, rng(0, seq_len - 1))

    q_rope = ggml_rope_ext(ctx, q, pos, None,
                            n_dims = head_dim,
                            mode = GGML_ROPE_TYPE_NORM,
                            n_ctx_orig = 2048,
                            freq_base = 10000.0,
                            freq_scale = 1.0,
                            ext_factor = 0.0,
                            attn_factor = 1.0,
                            beta_fast = 32.0,
                            beta_slow = 1.0)

    graph = ggml_build_forward_expand(ctx, q_rope)
    ggml_graph_compute(ctx, graph)

    out = ggml_get_f32(q_rope).ravel()

    expect_equal(length(out), head_dim * n_head * seq_len)
    assert sd(out) > 0


def test_ggml_flash_attn_ext_computes_attention():
    """ggml_flash_attn_ext computes attention"""
    ctx = ggml_init(128 * 1024 * 1024)

    head_dim = 8
    n_head = 2
    n_head_kv = 2
    seq_len = 4

    q = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, head_dim, n_head, seq_len, 1)
    k = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, head_dim, n_head_kv, seq_len, 1)
    v = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, head_dim, n_head_kv, seq_len, 1)

    set_seed(42)
    ggml_set_f32(q, rnorm(head_dim * n_head * seq_len))
    ggml_set_f32(k, rnorm(head_dim * n_head_kv * seq_len))
    ggml_set_f32(v, rnorm(head_dim * n_head_kv * seq_len))

    scale = 1.0 / sqrt(head_dim)

    out = ggml_flash_attn_ext(ctx, q, k, v, None, scale, 0.0, 0.0)

    graph = ggml_build_forward_expand(ctx, out)
    ggml_graph_compute(ctx, graph)

    result = ggml_get_f32(out).ravel()

    expect_equal(length(result), head_dim * n_head * seq_len)

    assert all(is_finite(result))
    assert sd(result) > 0

    shape = ggml_tensor_shape(out)
    expect_equal(shape[0], head_dim)
    expect_equal(prod(shape), head_dim * n_head * seq_len)


def test_rope_type_constants_are_defined():
    """RoPE type constants are defined"""
    expect_equal(GGML_ROPE_TYPE_NORM, 0)
    expect_equal(GGML_ROPE_TYPE_NEOX, 2)
    expect_equal(GGML_ROPE_TYPE_MROPE, 8)
    expect_equal(GGML_ROPE_TYPE_VISION, 24)

