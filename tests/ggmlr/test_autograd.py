"""ggmlR's tests/testthat/test-autograd.R: ag tensors, backward, optimizers, a training loop.

R's `get0(as.character(W$id), envir = grads)` is `grads[W]` here. ggmlR's values are R doubles,
ggmlpy's float32: expect_equal uses F32_TOL unless R gives its own tolerance."""
import numpy as np

import ggmlpy as g
from .conftest import expect_equal


def test_ag_tensor_creates_tensor_with_correct_shape():
    x = g.ag_tensor(np.arange(1, 7).reshape(3, 2).T)  # R's matrix(1:6, 2, 3)
    assert isinstance(x, g.AGTensor)
    assert x.data.shape == (2, 3)
    assert not x.requires_grad
    assert x.grad is None


def test_ag_param_sets_requires_grad_true():
    w = g.ag_param(np.arange(1, 5).reshape(2, 2).T)
    assert w.requires_grad


def test_ag_matmul_forward_pass_is_correct():
    A = g.ag_param(np.array([[1.0, 0], [0, 1]]))  # identity
    B = g.ag_tensor(np.array([[1.0, 3], [2, 4]]))
    out = g.ag_matmul(A, B)
    expect_equal(out.data, B.data)


def test_backward_computes_correct_gradient_for_matmul():
    W = g.ag_param(np.array([[1.0, 3], [2, 4]]))  # R's matrix(c(1, 2, 3, 4), 2, 2)
    x = g.ag_tensor(np.array([[1.0], [1]]))
    y_true = np.array([[4.0], [6]])  # exact match -> zero loss
    with g.with_grad_tape():
        out = g.ag_matmul(W, x)
        loss = g.ag_mse_loss(out, y_true)
    grads = g.backward(loss)
    assert abs(loss.data[0, 0]) < 1e-10
    assert np.max(np.abs(grads[W].data)) < 1e-10


def test_backward_nonzero_gradient_for_mse_loss():
    W = g.ag_param(np.eye(2))
    x = g.ag_tensor(np.array([[2.0], [3]]))
    y_true = np.zeros((2, 1))
    with g.with_grad_tape():
        out = g.ag_matmul(W, x)
        loss = g.ag_mse_loss(out, y_true)
    grads = g.backward(loss)
    gw = grads.get(W)
    assert gw is not None
    assert gw.data.shape == W.data.shape
    # d/dW MSE = 2/n (Wx - y) x^T = [[4, 6], [6, 9]]
    expect_equal(gw.data, np.array([[4.0, 6], [6, 9]]), rtol=1e-6, atol=0)


def test_relu_backward_gradient_is_zero_below_0():
    x = g.ag_param(np.array([[-1.0, -3], [2, 4]]))  # R's matrix(c(-1, 2, -3, 4), 2, 2)
    with g.with_grad_tape():
        out = g.ag_relu(x)
        loss = g.ag_mse_loss(out, np.zeros((2, 2)))
    gx = g.backward(loss)[x].data
    assert gx[0, 0] == 0
    assert gx[0, 1] == 0
    assert abs(gx[1, 0]) > 0
    assert abs(gx[1, 1]) > 0


def test_sigmoid_backward_is_correct():
    x = g.ag_param(np.zeros((1, 1)))
    with g.with_grad_tape():
        out = g.ag_sigmoid(x)
        loss = g.ag_mse_loss(out, np.zeros((1, 1)))
    gx = g.backward(loss)[x].data
    # sigmoid(0) = 0.5; d sigmoid = 0.25; d mse / d out = 2 * 0.5 = 1
    expect_equal(gx.ravel(), [0.25], rtol=1e-6, atol=0)


def test_cross_entropy_loss_backward_grad_shape_matches_pred():
    logits = g.ag_param(np.random.default_rng(1).uniform(size=(3, 4)))
    with g.with_grad_tape():
        pred = g.ag_softmax(logits)
        y = np.array([[1.0, 0, 0], [0, 1, 0], [0, 0, 1], [1, 0, 0]]).T  # one-hot columns
        loss = g.ag_cross_entropy_loss(pred, y)
    grads = g.backward(loss)
    assert grads[logits].data.shape == (3, 4)


def test_optimizer_sgd_updates_parameters():
    W = g.ag_param(np.eye(2))
    x = g.ag_tensor(np.array([[2.0], [3]]))
    y_true = np.zeros((2, 1))
    W_orig = W.data
    opt = g.optimizer_sgd({"W": W}, lr=0.1)
    with g.with_grad_tape():
        out = g.ag_matmul(W, x)
        loss = g.ag_mse_loss(out, y_true)
    grads = g.backward(loss)
    opt.step(grads)
    assert not np.array_equal(opt.params["W"].data, W_orig)


def test_optimizer_adam_updates_parameters():
    W = g.ag_param(np.eye(2))
    x = g.ag_tensor(np.array([[1.0], [1]]))
    y_true = np.zeros((2, 1))
    opt = g.optimizer_adam({"W": W}, lr=0.01)
    W_orig = W.data
    with g.with_grad_tape():
        out = g.ag_matmul(W, x)
        loss = g.ag_mse_loss(out, y_true)
    grads = g.backward(loss)
    opt.step(grads)
    assert not np.array_equal(opt.params["W"].data, W_orig)
    assert opt.t == 1


def test_ag_linear_forward_has_correct_output_shape():
    layer = g.ag_linear(4, 8, activation="relu")
    x = g.ag_tensor(np.random.default_rng(0).uniform(size=(4, 16)))
    out = layer.forward(x)
    assert out.data.shape == (8, 16)
    assert np.all(out.data >= 0)  # ReLU


def test_full_training_loop_reduces_loss():
    rng = np.random.default_rng(123)
    n = 64
    x_mat = rng.choice([0.0, 1.0], size=(2, n))
    y_mat = np.logical_xor(x_mat[0], x_mat[1]).astype(float).reshape(1, n)
    g.manual_seed(123)
    l1 = g.ag_linear(2, 4, activation="relu")
    l2 = g.ag_linear(4, 1, activation="sigmoid")
    params = l1.params() + l2.params()
    opt = g.optimizer_adam(params, lr=0.05)
    losses = np.zeros(50)
    for i in range(50):
        x = g.ag_tensor(x_mat)
        y = g.ag_tensor(y_mat)
        with g.with_grad_tape():
            h = l1.forward(x)
            out = l2.forward(h)
            loss = g.ag_mse_loss(out, y)
        grads = g.backward(loss)
        opt.step(grads)
        opt.zero_grad()
        losses[i] = loss.data[0, 0]
    assert losses[40:50].mean() < losses[0:10].mean()
