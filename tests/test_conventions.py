"""The Python conventions ag tensors, layers and optimizers follow (issue 14): methods and
operators people expect from numpy and PyTorch, clear errors, and readable reprs."""
import numpy as np
import pytest

import ggmlpy as g


def r(*shape, seed=0):
    return np.random.default_rng(seed + sum(shape)).standard_normal(shape)


# -- backward ---------------------------------------------------------------------------------------------
def test_backward_on_a_loss_computed_outside_a_tape_raises():
    w = g.ag_param(r(3, 2))
    loss = g.ag_sum(g.ag_mul(w, w))                      # no with_grad_tape(): nothing recorded
    with pytest.raises(g.GGMLError, match="with_grad_tape"):
        g.backward(loss)
    assert w.grad is None


def test_backward_on_a_loss_of_constants_raises():
    with g.with_grad_tape():
        loss = g.ag_sum(g.ag_tensor(r(3, 2)))
    with pytest.raises(g.GGMLError, match="nothing was recorded"):
        g.backward(loss)


def test_backward_on_a_loss_of_a_cleared_tape_raises():
    w = g.ag_param(r(3, 2))
    with g.with_grad_tape():
        loss = g.ag_sum(g.ag_mul(w, w))
    with g.with_grad_tape():
        pass
    with pytest.raises(g.GGMLError, match="earlier tape"):
        g.backward(loss)
