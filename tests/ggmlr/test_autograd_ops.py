"""ggmlR's tests/testthat/test-autograd-ops.R: every ag op's forward value and its gradcheck.

ag_gradcheck is called in ggmlR's form: `fn` takes the dict of inputs (R's named list).
ggmlR's values are R doubles, ggmlpy's float32: F32_TOL unless R gives its own tolerance.
R's set.seed + runif become numpy draws with the same seed and range."""
import math

import numpy as np
import pytest

import ggmlpy as g
from .conftest import expect_equal


def runif(seed, n, lo=0.0, hi=1.0, shape=None):
    return np.random.default_rng(seed).uniform(lo, hi, size=shape or (n,))


def rmat(seed, nrow, ncol, lo=0.0, hi=1.0):
    return np.random.default_rng(seed).uniform(lo, hi, size=(nrow, ncol))


def rnorm(seed, nrow, ncol):
    return np.random.default_rng(seed).normal(size=(nrow, ncol))


def m16():  # R's matrix(1:6, 2, 3): [[1, 3, 5], [2, 4, 6]]
    return np.arange(1.0, 7.0).reshape(3, 2).T


def check(fn, **inputs):
    return g.ag_gradcheck(fn, inputs, atol=1e-4, quiet=True)


# ---- ag_sum -----------------------------------------------------------------
def test_ag_sum_all_forward_correct():
    x = g.ag_tensor(m16())
    expect_equal(g.ag_sum(x).data.ravel(), [21])


def test_ag_sum_dim1_keepdim_false_shape_and_value():
    s = g.ag_sum(g.ag_tensor(m16()), dim=1)
    assert s.data.shape == (2, 1)
    expect_equal(s.data.ravel(), [9, 12])


def test_ag_sum_dim2_shape_and_value():
    s = g.ag_sum(g.ag_tensor(m16()), dim=2)
    assert s.data.shape == (1, 3)
    expect_equal(s.data.ravel(), [3, 7, 11])


def test_ag_sum_dim1_keepdim_true_shape_preserved():
    assert g.ag_sum(g.ag_tensor(m16()), dim=1, keepdim=True).data.shape == (2, 1)


def test_ag_sum_dim2_keepdim_true_shape_preserved():
    assert g.ag_sum(g.ag_tensor(m16()), dim=2, keepdim=True).data.shape == (1, 3)


def test_gradcheck_ag_sum_dim2_keepdim_true():
    W = g.ag_param(rmat(3, 2, 3, 0.5, 1.5))
    assert g.ag_gradcheck(lambda ins: g.ag_sum(g.ag_sum(ins["W"], dim=2, keepdim=True)), {"W": W},
                          atol=1e-4, quiet=True)


def test_gradcheck_ag_sum_all():
    W = g.ag_param(rmat(1, 2, 3, -1, 1))
    assert g.ag_gradcheck(lambda ins: g.ag_sum(g.ag_relu(ins["W"])), {"W": W}, atol=1e-4, verbose=False,
                          quiet=True)


def test_gradcheck_ag_sum_dim1():
    W = g.ag_param(rmat(2, 2, 3, 0.5, 1.5))
    assert check(lambda ins: g.ag_sum(g.ag_sum(ins["W"], dim=1)), W=W)


# ---- ag_mean ----------------------------------------------------------------
def test_ag_mean_all_forward():
    x = g.ag_tensor(np.array([[1.0, 3], [2, 4]]))
    expect_equal(g.ag_mean(x).data.ravel(), [2.5])


def test_gradcheck_ag_mean():
    W = g.ag_param(rmat(3, 2, 2, -1, 1))
    assert check(lambda ins: g.ag_mean(g.ag_sigmoid(ins["W"])), W=W)


# ---- ag_log -----------------------------------------------------------------
def test_ag_log_forward():
    out = g.ag_log(g.ag_tensor(np.array([[1.0, math.e, math.e ** 2]])))
    expect_equal(out.data.ravel(), [0, 1, 2], rtol=1e-6, atol=1e-7)


def test_gradcheck_ag_log():
    W = g.ag_param(rmat(4, 2, 2, 0.5, 2))
    assert check(lambda ins: g.ag_sum(g.ag_log(ins["W"])), W=W)


# ---- ag_exp -----------------------------------------------------------------
def test_ag_exp_forward():
    out = g.ag_exp(g.ag_tensor(np.array([[0.0, 1, 2]])))
    expect_equal(out.data.ravel(), np.exp([0, 1, 2]), rtol=1e-6, atol=0)


def test_gradcheck_ag_exp():
    W = g.ag_param(rmat(5, 2, 2, -0.5, 0.5))
    assert check(lambda ins: g.ag_sum(g.ag_exp(ins["W"])), W=W)


# ---- ag_reshape -------------------------------------------------------------
def test_ag_reshape_data_unchanged_shape_changes():
    x = g.ag_tensor(m16())
    out = g.ag_reshape(x, 3, 2)
    assert out.data.shape == (3, 2)
    expect_equal(out.data.ravel(order="F"), x.data.ravel(order="F"))  # R's as.numeric: column-major


def test_gradcheck_ag_reshape():
    W = g.ag_param(rmat(6, 2, 3, -1, 1))
    assert check(lambda ins: g.ag_sum(g.ag_reshape(ins["W"], 3, 2)), W=W)


# ---- ag_transpose -----------------------------------------------------------
def test_ag_transpose_forward():
    x = g.ag_tensor(m16())
    out = g.ag_transpose(x)
    assert out.data.shape == (3, 2)
    expect_equal(out.data, x.data.T)


def test_gradcheck_ag_transpose():
    W = g.ag_param(rmat(7, 2, 2, -1, 1))
    assert check(lambda ins: g.ag_sum(g.ag_relu(g.ag_transpose(ins["W"]))), W=W)


# ---- ag_clamp ---------------------------------------------------------------
def test_ag_clamp_forward():
    out = g.ag_clamp(g.ag_param(np.array([[-2.0, 0, 3]])), lo=-1, hi=2)
    expect_equal(out.data.ravel(), [-1, 0, 2])


def test_gradcheck_ag_clamp_interior_points_only():
    W = g.ag_param(rmat(8, 2, 2, -0.5, 0.5))
    assert check(lambda ins: g.ag_sum(g.ag_clamp(ins["W"], lo=-1, hi=1)), W=W)


# ---- ag_pow -----------------------------------------------------------------
def test_ag_pow_forward():
    out = g.ag_pow(g.ag_tensor(np.array([[2.0, 3, 4]])), 2)
    expect_equal(out.data.ravel(), [4, 9, 16])


def test_gradcheck_ag_pow_p2():
    W = g.ag_param(rmat(9, 2, 2, 0.5, 2))
    assert check(lambda ins: g.ag_sum(g.ag_pow(ins["W"], 2)), W=W)


def test_gradcheck_ag_pow_p05_sqrt():
    W = g.ag_param(rmat(10, 2, 2, 0.5, 2))
    assert check(lambda ins: g.ag_sum(g.ag_pow(ins["W"], 0.5)), W=W)


# ---- gradcheck: composite chain ---------------------------------------------
def test_gradcheck_matmul_relu_sum():
    W = g.ag_param(rmat(11, 2, 3, -1, 1))
    x = g.ag_tensor(rmat(111, 3, 1, -1, 1))
    assert check(lambda ins: g.ag_sum(g.ag_relu(g.ag_matmul(ins["W"], x))), W=W)


def test_gradcheck_add_with_bias_broadcast():
    W = g.ag_param(rmat(12, 4, 2, -1, 1))
    b = g.ag_param(rmat(121, 4, 1, -0.5, 0.5))
    x = g.ag_tensor(rmat(122, 2, 1, -1, 1))
    assert check(lambda ins: g.ag_mse_loss(g.ag_add(g.ag_matmul(ins["W"], x), ins["b"]), np.zeros((4, 1))),
                 W=W, b=b)


def test_gradcheck_sigmoid_generic_cross_entropy():
    W = g.ag_param(rmat(13, 3, 2, -0.5, 0.5))
    x = g.ag_tensor(rmat(131, 2, 1, -1, 1))
    y = np.array([[1.0], [0], [0]])
    assert check(lambda ins: g.ag_cross_entropy_loss(g.ag_sigmoid(g.ag_matmul(ins["W"], x)), y), W=W)


def test_gradcheck_fused_softmax_cross_entropy_loss():
    W = g.ag_param(rmat(131, 3, 2, -0.5, 0.5))
    x = g.ag_tensor(rmat(132, 2, 1, -1, 1))
    y = np.array([[1.0], [0], [0]])
    assert check(lambda ins: g.ag_softmax_cross_entropy_loss(g.ag_matmul(ins["W"], x), y), W=W)


def test_gradcheck_log_exp_identity_gradient():
    W = g.ag_param(rmat(14, 2, 2, -0.5, 0.5))
    assert check(lambda ins: g.ag_sum(g.ag_log(g.ag_exp(ins["W"]))), W=W)


def test_gradcheck_pow_x2_vs_mul_x_x():
    W = g.ag_param(rmat(15, 2, 2, 0.5, 2))
    W2 = g.ag_param(W.data + 0)  # same values, separate param
    ok_pow = check(lambda ins: g.ag_sum(g.ag_pow(ins["W"], 2)), W=W)
    ok_mul = check(lambda ins: g.ag_sum(g.ag_mul(ins["W2"], ins["W2"])), W2=W2)
    assert ok_pow
    assert ok_mul


# ---- ag_sub -----------------------------------------------------------------
def test_ag_sub_forward_value_correct():
    A = g.ag_tensor(np.array([[5.0, 2], [3, 1]]))
    B = g.ag_tensor(np.array([[1.0, 1], [2, 0]]))
    expect_equal(g.ag_sub(A, B).data, np.array([[4.0, 1], [1, 1]]))


def test_gradcheck_ag_sub():
    A = g.ag_param(rmat(20, 2, 2, -1, 1))
    B = g.ag_param(rmat(201, 2, 2, -1, 1))
    assert check(lambda ins: g.ag_mse_loss(g.ag_sub(ins["A"], ins["B"]), np.zeros((2, 2))), A=A, B=B)


def test_ag_sub_broadcast_ds_minus_1s_forward_correct():
    A = g.ag_tensor(np.arange(1.0, 7.0).reshape(2, 3).T)  # [3, 2]
    B = g.ag_tensor(np.array([[1.0, 2]]))  # [1, 2]
    C = g.ag_sub(A, B)
    assert C.data.shape == (3, 2)
    expect_equal(C.data, np.array([[0.0, 1, 2], [2, 3, 4]]).T)


def test_gradcheck_ag_sub_broadcast_ds_minus_1s():
    A = g.ag_param(rnorm(21, 4, 3))
    B = g.ag_param(rnorm(211, 1, 3))
    assert check(lambda ins: g.ag_mse_loss(g.ag_sub(ins["A"], ins["B"]), np.zeros((4, 3))), A=A, B=B)


def test_ag_mean_dim1_keepdim_true_shape_preserved():
    assert g.ag_mean(g.ag_tensor(m16()), dim=1, keepdim=True).data.shape == (2, 1)


def test_ag_mean_dim2_keepdim_true_shape_preserved():
    assert g.ag_mean(g.ag_tensor(m16()), dim=2, keepdim=True).data.shape == (1, 3)


def test_gradcheck_ag_mean_dim1_keepdim_true():
    W = g.ag_param(rnorm(22, 4, 3))
    assert check(lambda ins: g.ag_sum(g.ag_mean(ins["W"], dim=1, keepdim=True)), W=W)


def test_gradcheck_ag_mean_dim2_keepdim_true():
    W = g.ag_param(rnorm(23, 4, 3))
    assert check(lambda ins: g.ag_sum(g.ag_mean(ins["W"], dim=2, keepdim=True)), W=W)


# ---- ag_scale ---------------------------------------------------------------
def test_ag_scale_forward_value_correct():
    s = g.ag_scale(g.ag_tensor(np.array([[2.0, 6], [4, 8]])), 0.5)
    expect_equal(s.data, np.array([[1.0, 3], [2, 4]]))


def test_gradcheck_ag_scale():
    W = g.ag_param(rmat(21, 2, 2, -1, 1))
    assert check(lambda ins: g.ag_sum(g.ag_scale(ins["W"], 3.0)), W=W)


# ---- ag_softmax forward -----------------------------------------------------
def test_ag_softmax_output_sums_to_1_per_column():
    out = g.ag_softmax(g.ag_tensor(rmat(22, 3, 8, -2, 2)))
    # R: tolerance 1e-7 on doubles; float32 sums of three terms are exact to about 1e-7
    expect_equal(out.data.sum(axis=0), np.ones(8), rtol=2e-7, atol=0)


def test_ag_softmax_all_outputs_positive():
    out = g.ag_softmax(g.ag_tensor(np.array([[-10.0], [0], [10]])))
    assert np.all(out.data > 0)


def test_gradcheck_ag_softmax():
    W = g.ag_param(rmat(23, 3, 2, -1, 1))
    x = g.ag_tensor(rmat(231, 2, 1, -1, 1))
    assert check(lambda ins: g.ag_sum(g.ag_softmax(g.ag_matmul(ins["W"], x))), W=W)


# ---- ag_softmax_cross_entropy_loss forward ----------------------------------
ONE_HOT_3x4 = np.array([[1.0, 0, 0], [0, 1, 0], [0, 0, 1], [1, 0, 0]]).T


def test_ag_softmax_cross_entropy_loss_value_is_positive_scalar():
    logits = g.ag_param(rmat(24, 3, 4, -2, 2))
    with g.with_grad_tape():
        loss = g.ag_softmax_cross_entropy_loss(logits, ONE_HOT_3x4)
    assert loss.data.shape == (1, 1)
    assert loss.data[0, 0] > 0


def test_ag_softmax_cross_entropy_loss_perfect_logits_low_loss():
    logits = g.ag_tensor(np.array([[10.0, -10, -10], [-10, 10, -10]]).T)
    y = np.array([[1.0, 0, 0], [0, 1, 0]]).T
    assert g.ag_softmax_cross_entropy_loss(logits, y).data[0, 0] < 0.01


# ---- print methods: Python reprs carrying the same facts ----------------------------------------------
def test_print_ag_tensor_works_without_error():
    text = repr(g.ag_param(np.array([[1.0, 3], [2, 4]])))
    assert "ag_tensor" in text
    assert "requires_grad" in text


def test_print_ag_optimizer_sgd_works_without_error():
    w = g.ag_param(rmat(0, 2, 2))
    text = repr(g.optimizer_sgd({"w": w}, lr=0.05, momentum=0.9))
    assert "SGD" in text
    assert "0.05" in text


def test_print_ag_optimizer_adam_works_without_error():
    w = g.ag_param(rmat(0, 2, 2))
    assert "Adam" in repr(g.optimizer_adam({"w": w}, lr=1e-3))


def test_print_ag_sequential_works_without_error():
    text = repr(g.ag_sequential(g.ag_linear(4, 8), g.ag_linear(8, 2)))
    assert "ag_sequential" in text
    assert "2 layers" in text


def test_print_ag_dataloader_works_without_error():
    text = repr(g.ag_dataloader(rmat(0, 4, 32), batch_size=8))
    assert "ag_dataloader" in text
    assert "n=32" in text


def test_print_lr_scheduler_step_works_without_error():
    opt = g.optimizer_adam({"w": g.ag_param(rmat(0, 2, 2))}, lr=0.1)
    assert "lr_scheduler_step" in repr(g.lr_scheduler_step(opt, step_size=5))


def test_print_lr_scheduler_cosine_works_without_error():
    opt = g.optimizer_adam({"w": g.ag_param(rmat(0, 2, 2))}, lr=0.1)
    assert "lr_scheduler_cosine" in repr(g.lr_scheduler_cosine(opt, T_max=10))


# ---- ag_mul broadcast -------------------------------------------------------
def test_ag_mul_broadcast_ds_times_1s_forward_correct():
    A = g.ag_tensor(np.arange(1.0, 7.0).reshape(2, 3).T)  # [3, 2]
    B = g.ag_tensor(np.array([[2.0, 3]]))  # [1, 2]
    C = g.ag_mul(A, B)
    assert C.data.shape == (3, 2)
    expect_equal(C.data, np.array([[2.0, 4, 6], [12, 15, 18]]).T)


def test_ag_mul_broadcast_ds_times_d1_forward_correct():
    A = g.ag_tensor(np.arange(1.0, 7.0).reshape(2, 3).T)  # [3, 2]
    B = g.ag_tensor(np.array([[10.0], [20], [30]]))  # [3, 1]
    C = g.ag_mul(A, B)
    assert C.data.shape == (3, 2)
    expect_equal(C.data, np.array([[10.0, 40, 90], [40, 100, 180]]).T)


def test_gradcheck_ag_mul_broadcast_ds_times_1s():
    A = g.ag_param(rnorm(50, 4, 3))
    B = g.ag_param(rnorm(501, 1, 3))
    assert check(lambda ins: g.ag_mse_loss(g.ag_mul(ins["A"], ins["B"]), np.zeros((4, 3))), A=A, B=B)


def test_gradcheck_ag_mul_broadcast_ds_times_d1():
    A = g.ag_param(rnorm(51, 4, 3))
    B = g.ag_param(rnorm(511, 4, 1))
    assert check(lambda ins: g.ag_mse_loss(g.ag_mul(ins["A"], ins["B"]), np.zeros((4, 3))), A=A, B=B)


# ---- ag_softmax_cross_entropy_loss: integer targets -------------------------
def test_ag_softmax_cross_entropy_loss_integer_targets_equal_one_hot():
    logits = rnorm(60, 16, 8)
    idx = np.array([2, 0, 5, 1, 3, 7, 4, 6])  # 0-based
    oh = np.zeros((16, 8))
    oh[idx, np.arange(8)] = 1.0
    lt1, lt2 = g.ag_param(logits), g.ag_param(logits)
    with g.with_grad_tape():
        l1 = g.ag_softmax_cross_entropy_loss(lt1, idx)
    with g.with_grad_tape():
        l2 = g.ag_softmax_cross_entropy_loss(lt2, oh)
    expect_equal(l1.data.ravel(), l2.data.ravel(), rtol=1e-6, atol=0)


def test_ag_softmax_cross_entropy_loss_integer_targets_give_sensible_loss():
    logits = g.ag_param(np.zeros((8, 4)))
    with g.with_grad_tape():
        loss = g.ag_softmax_cross_entropy_loss(logits, np.array([0, 1, 2, 3]))
    expect_equal(loss.data.ravel(), [math.log(8)], rtol=1e-5, atol=0)


def test_gradcheck_ag_softmax_cross_entropy_loss_with_integer_targets():
    W = g.ag_param(rmat(62, 8, 3, -0.5, 0.5))
    x = g.ag_tensor(rmat(621, 3, 1))
    idx = 2  # a single position
    assert check(lambda ins: g.ag_softmax_cross_entropy_loss(g.ag_matmul(ins["W"], x), idx), W=W)
