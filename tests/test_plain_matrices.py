"""Every ag_* op takes plain numpy matrices as constants, as ggmlR's take R matrices ("ag_tensor or
numeric matrix") and as the Python operators do (tensor._operand's rule): the result equals the
op on ag_tensor() copies, a plain matrix joins the other operand's device and dtype, and it gets
no gradient while the ag tensor beside it does."""
import numpy as np
import pytest

import ggmlpy as g

rng = np.random.default_rng(0)
A = rng.uniform(0.5, 1.5, size=(3, 4))
B = rng.uniform(0.5, 1.5, size=(3, 4))
C = rng.uniform(0.5, 1.5, size=(4, 2))
COL = rng.uniform(0.5, 1.5, size=(3, 1))

# op -> (positional arguments, keyword arguments); every array is passed plain and as an ag tensor
CALLS = {
    "ag_abs": ((A,), {}), "ag_exp": ((A,), {}), "ag_log": ((A,), {}), "ag_sqrt": ((A,), {}),
    "ag_relu": ((A - 1,), {}), "ag_sigmoid": ((A,), {}), "ag_tanh": ((A,), {}), "ag_gelu": ((A,), {}),
    "ag_silu": ((A,), {}), "ag_neg": ((A,), {}), "ag_transpose": ((A,), {}),
    "ag_add": ((A, COL), {}), "ag_sub": ((A, B), {}), "ag_mul": ((A, B), {}), "ag_div": ((A, B), {}),
    "ag_matmul": ((A, C), {}), "ag_concat": ((A, B), {"dim": 2}),
    "ag_scale": ((A, 2.5), {}), "ag_pow": ((A, 2.0), {}), "ag_clamp": ((A, 0.8, 1.2), {}),
    "ag_softmax": ((A,), {"mask": np.zeros((3, 4))}), "ag_sum": ((A,), {"dim": 1}), "ag_mean": ((A,), {"dim": 2}),
    "ag_reshape": ((A, 4, 3), {}), "ag_permute": ((A, 1, 0), {}), "ag_slice": ((A, slice(0, 2), None), {}),
    "ag_layer_norm": ((A,), {"gamma": np.full((3, 1), 2.0), "beta": COL}),
    "ag_rms_norm": ((A,), {"gamma": COL}),
    "ag_rope": ((rng.uniform(-1, 1, size=(4, 2, 3)),), {"pos": [0, 2, 5]}),  # [head_dim, n_head, T]
    "ag_mse_loss": ((A, B), {}), "ag_cross_entropy_loss": ((A / 4, B), {}),
    "ag_softmax_cross_entropy_loss": ((A, B), {}),
    # A as one image [W, H] of one channel
    "ag_conv2d": ((A, C[:2]), {"b": np.full((1, 1), 0.5), "padding": 1}), "ag_max_pool2d": ((A, 2), {}),
}
NO_TENSOR_ARGS = {"ag_zeros", "ag_ones"}  # they take sizes


def test_the_table_names_every_ag_op():
    assert set(CALLS) | NO_TENSOR_ARGS == set(g.ag_ops)


def _as_tensors(v):
    return g.ag_tensor(v) if isinstance(v, np.ndarray) else v


@pytest.mark.parametrize("name", sorted(CALLS))
def test_plain_matrices_are_constants(name):
    args, kwargs = CALLS[name]
    op = getattr(g, name)
    want = op(*map(_as_tensors, args), **{k: _as_tensors(v) for k, v in kwargs.items()}).numpy()
    got = op(*args, **kwargs)
    assert isinstance(got, g.AGTensor) and not got.requires_grad
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)


def test_a_plain_matrix_beside_an_f16_parameter_gives_it_its_gradient():
    W = g.ag_param(C.T, dtype="f16")  # [2, 4]
    with g.with_grad_tape():
        loss = g.ag_sum(g.ag_matmul(W, A.T))  # A.T [4, 3]: a plain matrix, made an f16 constant
    grads = g.backward(loss)
    np.testing.assert_allclose(grads[W].numpy(), np.tile(A.T.sum(axis=1), (2, 1)), rtol=2e-3)


def test_the_first_argument_may_be_plain_too():
    b = g.ag_tensor(B)
    np.testing.assert_allclose(g.ag_sub(A, b).numpy(), A - B, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(g.ag_matmul(A, g.ag_tensor(C)).numpy(), A @ C, rtol=1e-6)


def test_what_is_neither_a_tensor_nor_a_matrix_is_named():
    with pytest.raises(g.GGMLError, match="ag_relu: x must be an ag tensor or a numeric matrix, got str"):
        g.ag_relu("x")
    with pytest.raises(g.GGMLError, match="expected numbers"):
        g.ag_matmul(g.ag_tensor(A), np.array([["a"]]))
    with pytest.raises(g.GGMLError, match="use ag_scale"):
        g.ag_mul(A, 2.0)  # as in ggmlR: a scalar factor is ag_scale's


def test_dp_train_with_plain_matrices_and_a_dict_model():
    """ggmlR's dp_train_demo idiom: a list(forward, parameters) model and samples of plain matrices."""
    g.manual_seed(0)
    X = rng.normal(size=(4, 32))
    Y = np.array([[0.5, -0.3, 0.8, -0.1]]) @ X
    data = [{"x": X[:, [i]], "y": Y[:, [i]]} for i in range(32)]

    def make_model():
        W, b = g.ag_param(rng.normal(size=(1, 4)) * 0.1), g.ag_param(np.zeros((1, 1)))
        return {"forward": lambda x: g.ag_add(g.ag_matmul(W, x), b), "parameters": lambda: {"W": W, "b": b}}

    res = g.dp_train(make_model, data, loss_fn=lambda out, tgt: g.ag_mse_loss(out, tgt),
                     forward_fn=lambda m, s: m["forward"](s["x"]), target_fn=lambda s: s["y"],
                     n_iter=200, lr=2e-2, verbose=False)
    h = res["loss_history"]
    assert np.all(np.isfinite(h)) and h[-40:].mean() < 0.1 * h[:40].mean()
