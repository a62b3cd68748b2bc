"""ggmlR's tests/testthat/test-autograd-missing.R: ag_tanh forward and backward."""
import numpy as np

import ggmlpy as g
from .conftest import expect_equal


def test_ag_tanh_forward_pass_is_correct():
    x = g.ag_tensor(np.array([[0.0, -1], [1, 2]]))  # R's matrix(c(0, 1, -1, 2), 2, 2)
    y = g.ag_tanh(x)
    expect_equal(y.data, np.tanh(x.data), rtol=1e-6, atol=0)


def test_ag_tanh_backward_computes_correct_gradient():
    x = g.ag_param(np.array([[0.5, 1.0], [-0.5, -1.0]]))
    with g.with_grad_tape():
        y = g.ag_tanh(x)
        loss = g.ag_sum(y)
    grads = g.backward(loss)
    gx = grads.get(x)
    assert gx is not None
    expect_equal(gx.data, 1 - np.tanh(x.data) ** 2, rtol=1e-5, atol=0)
