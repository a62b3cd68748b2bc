"""ggmlR's tests/testthat/test-ag-mha.R: ag_multihead_attention.

ggmlR's internal `.ag_data(out)` is `out.data`, and its `.ag_row_concat` is ag_concat along rows."""
import functools
import math

import numpy as np
import pytest

import ggmlpy as g


def rnorm(seed, *shape):
    return np.random.default_rng(seed).normal(size=shape)


# ---- construction -----------------------------------------------------------------------------------
def test_ag_multihead_attention_constructs_without_error():
    mha = g.ag_multihead_attention(64, 8)
    assert isinstance(mha, g.ag_multihead_attention)
    assert mha.d_model == 64
    assert mha.n_heads == 8
    assert mha.d_k == 8


def test_ag_multihead_attention_rejects_d_model_not_divisible_by_n_heads():
    with pytest.raises(g.GGMLError):
        g.ag_multihead_attention(65, 8)


def test_parameters_returns_w_q_w_k_w_v_w_o_b_o():
    p = g.ag_multihead_attention(16, 2).parameters()
    assert all(name in p.keys() for name in ("W_q", "W_k", "W_v", "W_o", "b_o"))
    assert len(p) == 5


def test_parameters_without_bias_returns_4_params():
    p = g.ag_multihead_attention(16, 2, bias=False).parameters()
    assert len(p) == 4
    assert "b_o" not in p.keys()


# ---- forward shapes ---------------------------------------------------------------------------------
def test_self_attention_output_shape_matches_input():
    g.ggml_set_seed(1)
    mha = g.ag_multihead_attention(32, 4)
    out = mha.forward(g.ag_tensor(rnorm(1, 32, 7)))
    assert out.data.shape == (32, 7)


def test_cross_attention_output_shape_is_d_model_seq_q():
    g.ggml_set_seed(2)
    mha = g.ag_multihead_attention(32, 4)
    q = g.ag_tensor(rnorm(2, 32, 5))
    kv = g.ag_tensor(rnorm(21, 32, 9))
    assert mha.forward(q, kv, kv).data.shape == (32, 5)


def test_single_head_attention_works_n_heads_1():
    mha = g.ag_multihead_attention(16, 1)
    assert mha.forward(g.ag_tensor(rnorm(0, 16, 4))).data.shape == (16, 4)


# ---- causal mask ------------------------------------------------------------------------------------
def test_causal_mask_future_tokens_receive_near_zero_attention_weight():
    g.ggml_set_seed(3)
    mha = g.ag_multihead_attention(8, 1, bias=False)
    seq_len = 5
    x = g.ag_tensor(rnorm(3, 8, seq_len))
    d_no = mha.forward(x, causal_mask=False).data
    d_mk = mha.forward(x, causal_mask=True).data
    assert not np.allclose(d_no, d_mk, rtol=1e-6, atol=0)  # the mask changes the attention
    assert d_mk.shape == (8, seq_len)


# ---- backward ---------------------------------------------------------------------------------------
def test_backward_passes_through_mha_without_error():
    g.ggml_set_seed(4)
    mha = g.ag_multihead_attention(16, 2)
    x = g.ag_tensor(rnorm(4, 16, 4))
    with g.with_grad_tape():
        out = mha.forward(x)
        loss = g.ag_mse_loss(out, np.zeros((16, 4)))
    grads = g.backward(loss)
    for name in ("W_q", "W_k", "W_v", "W_o"):
        gp = grads.get(mha.parameters()[name])
        assert gp is not None, f"gradient missing for {name}"
        assert np.any(gp.data != 0), f"gradient zero for {name}"


def test_optimizer_step_reduces_mha_loss_over_10_iterations():
    g.ggml_set_seed(5)
    d_model, n_heads, seq_len = 16, 2, 6
    mha = g.ag_multihead_attention(d_model, n_heads)
    opt = g.optimizer_adam(mha.parameters(), lr=1e-3)
    x_mat, y_mat = rnorm(5, d_model, seq_len), rnorm(51, d_model, seq_len)
    losses = np.zeros(10)
    for i in range(10):
        with g.with_grad_tape():
            out = mha.forward(g.ag_tensor(x_mat))
            loss = g.ag_mse_loss(out, y_mat)
        opt.step(g.backward(loss))
        opt.zero_grad()
        losses[i] = loss.data[0, 0]
    assert losses[9] < losses[0]


def test_ag_gradcheck_passes_for_mha_small_model():
    g.ggml_set_seed(6)
    mha = g.ag_multihead_attention(4, 2, bias=False)
    p = mha.parameters()
    x_fix = rnorm(6, 4, 3)
    eye = np.eye(4)

    def head(ins, h):
        sel = g.ag_tensor(eye[2 * h:2 * h + 2, :])
        q_h = g.ag_matmul(sel, g.ag_matmul(ins["W_q"], g.ag_tensor(x_fix)))
        k_h = g.ag_matmul(sel, g.ag_matmul(ins["W_k"], g.ag_tensor(x_fix)))
        v_h = g.ag_matmul(sel, g.ag_matmul(ins["W_v"], g.ag_tensor(x_fix)))
        sc = g.ag_scale(g.ag_matmul(g.ag_transpose(q_h), k_h), 1 / math.sqrt(2))
        at = g.ag_transpose(g.ag_softmax(g.ag_transpose(sc)))
        return g.ag_matmul(v_h, g.ag_transpose(at))

    def fn(ins):
        heads = functools.reduce(lambda a, b: g.ag_concat(a, b, dim=1), [head(ins, h) for h in range(2)])
        return g.ag_mse_loss(g.ag_matmul(ins["W_o"], heads), np.zeros((4, 3)))

    inputs = {name: p[name] for name in ("W_q", "W_k", "W_v", "W_o")}
    assert g.ag_gradcheck(fn, inputs, atol=1e-3, quiet=True)


# ---- train / eval -----------------------------------------------------------------------------------
def test_ag_train_ag_eval_toggle_training_flag():
    mha = g.ag_multihead_attention(16, 2)
    assert mha.training
    g.ag_eval(mha)
    assert not mha.training
    g.ag_train(mha)
    assert mha.training


def test_dropout_05_changes_output_in_training_vs_eval():
    g.ggml_set_seed(7)
    mha = g.ag_multihead_attention(16, 2, dropout=0.5)
    x = g.ag_tensor(rnorm(7, 16, 6))
    g.ag_train(mha)
    out_train = mha.forward(x).data
    g.ag_eval(mha)
    out_eval = mha.forward(x).data
    assert not np.allclose(out_train, out_eval, rtol=1e-6, atol=0)


# ---- inside ag_sequential ---------------------------------------------------------------------------
def test_ag_multihead_attention_works_inside_ag_sequential():
    g.ggml_set_seed(8)
    model = g.ag_sequential(g.ag_multihead_attention(16, 2), g.ag_dropout(0.0))
    out = model.forward(g.ag_tensor(rnorm(8, 16, 5)))
    assert out.data.shape == (16, 5)
    assert len(model.parameters()) >= 5
