"""Port of ggmlR's tests/testthat/test-rope-multi.R (ggmlR 0.8.2)."""
import numpy as np  # noqa: F401
import pytest  # noqa: F401

from ggmlpy import *  # noqa: F401,F403
from ggmlpy import GGMLError  # noqa: F401

from .rlike import *  # noqa: F401,F403


def test_m_rope_vision_rope_type_constants_are_defined():
    """M-RoPE / VISION rope-type constants are defined"""
    expect_equal(GGML_ROPE_TYPE_MROPE, 8)
    expect_equal(GGML_ROPE_TYPE_VISION, 24)


def test_ggml_rope_multi_computes_m_rope_and_changes_the_tensor():
    """ggml_rope_multi computes M-RoPE and changes the tensor"""
    ctx = ggml_init(64 * 1024 * 1024)

    head_dim = 16
    n_head   = 2
    seq_len  = 4

    a = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, head_dim, n_head, seq_len, 1)
    ggml_set_f32(a, rep(1.0, head_dim * n_head * seq_len))

    pos = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, seq_len * 4)
    ggml_set_i32(pos, rep(rng(0, seq_len - 1), times = 4))

    sec = c(2, 2, 2, 2)

    r = ggml_rope_multi(ctx, a, pos, None,
                         n_dims = head_dim,
                         sections = sec,
                         mode = GGML_ROPE_TYPE_MROPE,
                         n_ctx_orig = 2048,
                         freq_base = 10000.0,
                         freq_scale = 1.0,
                         ext_factor = 0.0,
                         attn_factor = 1.0,
                         beta_fast = 32.0,
                         beta_slow = 1.0)

    graph = ggml_build_forward_expand(ctx, r)
    ggml_graph_compute(ctx, graph)

    out = ggml_get_f32(r).ravel()
    expect_equal(length(out), head_dim * n_head * seq_len)
    assert all(is_finite(out))
    assert sd(out) > 0


def test_ggml_rope_multi_preserves_tensor_shape():
    """ggml_rope_multi preserves tensor shape"""
    ctx = ggml_init(64 * 1024 * 1024)

    head_dim = 8
    seq_len  = 3
    a = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, head_dim, 1, seq_len, 1)
    ggml_set_f32(a, as_numeric(rng(1, head_dim * seq_len)))

    pos = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, seq_len * 4)
    ggml_set_i32(pos, rep(rng(0, seq_len - 1), times = 4))

    r = ggml_rope_multi(ctx, a, pos, None,
                         n_dims = head_dim,
                         sections = c(1, 1, 1, 1),
                         mode = GGML_ROPE_TYPE_MROPE)

    graph = ggml_build_forward_expand(ctx, r)
    ggml_graph_compute(ctx, graph)

    shape = ggml_tensor_shape(r)
    expect_equal(shape[0], head_dim)
    expect_equal(shape[2], seq_len)

