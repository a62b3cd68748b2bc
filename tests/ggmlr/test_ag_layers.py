"""ggmlR's tests/testthat/test-ag-layers.R: ag_sequential, ag_dropout, ag_batch_norm, ag_embedding.

ggmlR draws initial weights and masks from R's generator after set.seed; ggmlpy from its own
(ggml_set_seed / manual_seed), so the seeds are kept but the draws differ. Values: F32_TOL
unless R gives its own tolerance."""
import numpy as np

import ggmlpy as g
from .conftest import expect_equal


def rng(seed):
    g.ggml_set_seed(seed)
    return np.random.default_rng(seed)


# ---- ag_sequential ----------------------------------------------------------------------------------
def test_ag_sequential_forward_shape_correct():
    r = rng(1)
    model = g.ag_sequential(g.ag_linear(4, 8, activation="relu"), g.ag_linear(8, 3, activation="softmax"))
    out = model.forward(g.ag_tensor(r.uniform(size=(4, 16))))
    assert out.data.shape == (3, 16)


def test_ag_sequential_parameters_collects_all_params():
    model = g.ag_sequential(g.ag_linear(4, 8), g.ag_linear(8, 2))
    params = model.parameters()
    assert len(params) == 4  # 2 layers x (W, b)
    assert all(p.requires_grad for p in params)


def test_ag_sequential_train_eval_mode_propagates_to_sub_layers():
    model = g.ag_sequential(g.ag_linear(4, 8), g.ag_dropout(0.5), g.ag_linear(8, 2))
    g.ag_eval(model)
    assert not model.training
    assert not model.layers[1].training  # dropout
    g.ag_train(model)
    assert model.training
    assert model.layers[1].training


def test_ag_sequential_backward_reduces_loss():
    r = rng(2)
    model = g.ag_sequential(g.ag_linear(4, 8, activation="relu"), g.ag_linear(8, 2))
    opt = g.optimizer_adam(model.parameters(), lr=0.01)
    n = 32
    x_mat = r.uniform(size=(4, n))
    y_mat = np.zeros((2, n))
    y_mat[0, :] = 1  # all class 0
    losses = np.zeros(10)
    for i in range(10):
        with g.with_grad_tape():
            out = model.forward(g.ag_tensor(x_mat))
            loss = g.ag_mse_loss(out, y_mat)
        grads = g.backward(loss)
        opt.step(grads)
        opt.zero_grad()
        losses[i] = loss.data[0, 0]
    assert losses[7:10].mean() < losses[0:3].mean()


# ---- ag_dropout -------------------------------------------------------------------------------------
def test_ag_dropout_eval_mode_is_identity():
    rng(10)
    drop = g.ag_dropout(0.5)
    g.ag_eval(drop)
    x = g.ag_tensor(np.array([[1.0, 3], [2, 4]]))
    expect_equal(drop.forward(x).data, x.data)


def test_ag_dropout_train_mode_changes_some_values():
    rng(11)
    drop = g.ag_dropout(0.5)  # training by default
    out = drop.forward(g.ag_tensor(np.ones((10, 10))))
    vals = out.data.ravel()
    assert np.any(vals == 0)
    assert np.any(np.abs(vals - 2) < 1e-9)  # inverted dropout: kept values scaled by 1 / (1 - 0.5)


def test_ag_dropout_rate_0_is_always_identity():
    drop = g.ag_dropout(0.0)
    x = g.ag_tensor(np.array([[1.0, 3], [2, 4]]))
    expect_equal(drop.forward(x).data, x.data)


def test_ag_dropout_gradcheck_passes_in_train_mode():
    r = rng(12)
    W = g.ag_param(r.uniform(-1, 1, size=(2, 4)))
    x = g.ag_tensor(r.uniform(-1, 1, size=(4, 1)))
    drop = g.ag_dropout(0.0)  # rate 0: a deterministic identity, safe for gradcheck
    assert g.ag_gradcheck(lambda ins: g.ag_mse_loss(drop.forward(g.ag_matmul(ins["W"], x)), np.zeros((2, 1))),
                          {"W": W}, atol=1e-4, quiet=True)


# ---- ag_batch_norm ----------------------------------------------------------------------------------
def test_ag_batch_norm_output_has_approx_zero_mean_and_unit_var_train():
    r = rng(20)
    bn = g.ag_batch_norm(4)
    out = bn.forward(g.ag_tensor(r.normal(5, 3, size=(4, 64)))).data
    mu = out.mean(axis=1)
    v = ((out - mu[:, None]) ** 2).mean(axis=1)
    assert np.max(np.abs(mu)) < 1e-5
    expect_equal(v, np.ones(4), rtol=0.05, atol=0)


def test_ag_batch_norm_running_stats_update_in_train_mode():
    rng(21)
    bn = g.ag_batch_norm(2)
    expect_equal(bn.running_mean.data.ravel(), [0, 0])
    x = g.ag_tensor(np.array([[10.0, 10, 20, 20], [10, 10, 20, 20]]))  # R's matrix(c(10,10,10,10,20,20,20,20), 2, 4)
    bn.forward(x)
    assert bn.running_mean.data[0, 0] > 0
    assert bn.running_mean.data[1, 0] > 0


def test_ag_batch_norm_eval_mode_uses_running_stats():
    r = rng(22)
    bn = g.ag_batch_norm(2)
    for _ in range(20):
        bn.forward(g.ag_tensor(r.normal(size=(2, 32)) + np.array([[5.0], [-5.0]])))
    running_mean_saved = bn.running_mean.data
    g.ag_eval(bn)
    out1 = bn.forward(g.ag_tensor(np.array([[5.0], [-5]])))
    out2 = bn.forward(g.ag_tensor(np.array([[5.0], [-5]])))
    expect_equal(out1.data, out2.data)
    expect_equal(bn.running_mean.data, running_mean_saved)  # eval mode leaves them alone


def test_ag_batch_norm_gradcheck_passes_gamma_beta():
    r = rng(23)
    bn = g.ag_batch_norm(3)
    x_d = r.normal(size=(3, 8))

    def fn(ins):
        orig = bn.gamma
        bn.gamma = ins["gamma"]
        out = bn.forward(g.ag_tensor(x_d))
        bn.gamma = orig
        return g.ag_sum(out)

    assert g.ag_gradcheck(fn, {"gamma": bn.gamma}, atol=1e-3, quiet=True)


# ---- ag_embedding -----------------------------------------------------------------------------------
def test_ag_embedding_output_shape_correct():
    emb = g.ag_embedding(10, 4)
    idx = np.array([[0, 7], [3, 2]])  # R's matrix(c(0L, 3L, 7L, 2L), 2L, 2L)
    assert emb.forward(idx).data.shape == (4, 4)  # [dim, seq_len * batch]


def test_ag_embedding_same_index_same_output():
    emb = g.ag_embedding(10, 4)
    out = emb.forward(np.array([[0, 0]]))
    expect_equal(out.data[:, 0], out.data[:, 1])


def test_ag_embedding_gradcheck_passes():
    rng(30)
    emb = g.ag_embedding(5, 3)
    idx = np.array([[0, 2, 4]])

    def fn(ins):
        orig = emb.weight
        emb.weight = ins["weight"]
        out = emb.forward(idx)
        emb.weight = orig
        return g.ag_sum(out)

    assert g.ag_gradcheck(fn, {"weight": emb.weight}, atol=1e-4, quiet=True)


def test_ag_embedding_optimizer_updates_weight():
    rng(31)
    emb = g.ag_embedding(5, 3)
    opt = g.optimizer_adam(emb.parameters(), lr=0.1)
    W0 = emb.weight.data
    with g.with_grad_tape():
        out = emb.forward(np.array([[0, 1, 2]]))
        loss = g.ag_sum(g.ag_pow(out, 2))  # push embeddings toward 0
    opt.step(g.backward(loss))
    assert not np.array_equal(emb.weight.data, W0)


# ---- integration ------------------------------------------------------------------------------------
def test_integration_sequential_model_with_bn_and_dropout_trains():
    r = rng(40)
    model = g.ag_sequential(g.ag_linear(4, 16, activation="relu"), g.ag_batch_norm(16), g.ag_dropout(0.2),
                            g.ag_linear(16, 2))
    opt = g.optimizer_adam(model.parameters(), lr=0.01)
    n = 64
    x_mat = r.uniform(size=(4, n))
    y_mat = np.vstack([np.ones(n), np.zeros(n)])  # all class 0
    losses = np.zeros(15)
    for i in range(15):
        with g.with_grad_tape():
            out = model.forward(g.ag_tensor(x_mat))
            loss = g.ag_mse_loss(out, y_mat)
        grads = g.backward(loss)
        opt.step(grads)
        opt.zero_grad()
        losses[i] = loss.data[0, 0]
    assert losses[12:15].mean() < losses[0:3].mean()
