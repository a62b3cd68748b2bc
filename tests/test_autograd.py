"""ag_* ops: forward against numpy, gradients against finite differences, and the tape's contract."""
import numpy as np
import pytest

import ggmlpy as g

rng = np.random.default_rng(7)


def r(*shape, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, size=shape)


def away(x, *kinks, gap=0.05):
    """Move entries off the kinks of piecewise functions, where finite differences are meaningless."""
    for k in kinks:
        near = np.abs(x - k) < gap
        x[near] = k + np.copysign(gap, x[near] - k + 1e-12)
    return x


def softmax_cols(x):
    e = np.exp(x - x.max(axis=0))
    return e / e.sum(axis=0)


# (name, fn on ag tensors, numpy reference, input arrays)
UNARY = [
    ("relu", g.ag_relu, lambda x: np.maximum(x, 0), [away(r(4, 3), 0)]),
    ("sigmoid", g.ag_sigmoid, lambda x: 1 / (1 + np.exp(-x)), [r(4, 3)]),
    ("tanh", g.ag_tanh, np.tanh, [r(4, 3)]),
    ("exp", g.ag_exp, np.exp, [r(4, 3)]),
    ("log", g.ag_log, np.log, [r(4, 3, lo=0.5, hi=2)]),
    ("sqrt", g.ag_sqrt, np.sqrt, [r(4, 3, lo=0.5, hi=2)]),
    ("neg", g.ag_neg, np.negative, [r(4, 3)]),
    ("abs", g.ag_abs, np.abs, [away(r(4, 3), 0)]),
    ("gelu", g.ag_gelu, lambda x: x * 0.5 * (1 + np.vectorize(__import__("math").erf)(x / np.sqrt(2))), [r(4, 3)]),
    ("silu", g.ag_silu, lambda x: x / (1 + np.exp(-x)), [r(4, 3)]),
    ("softmax", g.ag_softmax, softmax_cols, [r(5, 3)]),
    ("scale", lambda x: g.ag_scale(x, -1.7), lambda x: -1.7 * x, [r(4, 3)]),
    ("pow3", lambda x: g.ag_pow(x, 3), lambda x: x ** 3, [r(4, 3)]),
    ("pow1.5", lambda x: g.ag_pow(x, 1.5), lambda x: x ** 1.5, [r(4, 3, lo=0.5, hi=2)]),
    ("clamp", lambda x: g.ag_clamp(x, -0.5, 0.4), lambda x: np.clip(x, -0.5, 0.4), [away(r(5, 4), -0.5, 0.4)]),
    ("sum", g.ag_sum, lambda x: x.sum().reshape(1, 1), [r(4, 3)]),
    ("sum1", lambda x: g.ag_sum(x, 1), lambda x: x.sum(1, keepdims=True), [r(4, 3)]),
    ("sum2", lambda x: g.ag_sum(x, 2), lambda x: x.sum(0, keepdims=True), [r(4, 3)]),
    ("mean", g.ag_mean, lambda x: x.mean().reshape(1, 1), [r(4, 3)]),
    ("mean1", lambda x: g.ag_mean(x, 1), lambda x: x.mean(1, keepdims=True), [r(4, 3)]),
    ("transpose", g.ag_transpose, lambda x: x.T, [r(4, 3)]),
    ("reshape", lambda x: g.ag_reshape(x, 2, 6), lambda x: x.reshape(2, 6, order="F"), [r(4, 3)]),
    ("slice", lambda x: g.ag_slice(x, slice(1, 3), slice(0, 2)), lambda x: x[1:3, 0:2], [r(4, 3)]),
    ("layer_norm", g.ag_layer_norm, lambda x: (x - x.mean(0)) / np.sqrt(x.var(0) + 1e-5), [r(5, 3)]),
]
BINARY = [
    ("matmul", g.ag_matmul, lambda a, b: a @ b, [r(3, 4), r(4, 2)]),
    ("add", g.ag_add, np.add, [r(3, 4), r(3, 4)]),
    ("add_col", g.ag_add, np.add, [r(3, 4), r(3, 1)]),
    ("add_row", g.ag_add, np.add, [r(3, 4), r(1, 4)]),
    ("sub_row", g.ag_sub, np.subtract, [r(3, 4), r(1, 4)]),
    ("mul", g.ag_mul, np.multiply, [r(3, 4), r(3, 4)]),
    ("mul_lhs_col", g.ag_mul, np.multiply, [r(3, 1), r(3, 4)]),
    ("div", g.ag_div, np.divide, [r(3, 4), r(3, 4, lo=0.5, hi=2)]),
    ("div_row", g.ag_div, np.divide, [r(3, 4), r(1, 4, lo=0.5, hi=2)]),
    ("concat1", lambda a, b: g.ag_concat(a, b, 1), lambda a, b: np.vstack([a, b]), [r(2, 3), r(4, 3)]),
    ("concat2", lambda a, b: g.ag_concat(a, b, 2), lambda a, b: np.hstack([a, b]), [r(2, 3), r(2, 1)]),
    ("mse", g.ag_mse_loss, lambda p, t: np.mean((p - t) ** 2).reshape(1, 1), [r(3, 4), r(3, 4)]),
]
CASES = UNARY + BINARY


@pytest.mark.parametrize("name,fn,ref,arrays", CASES, ids=[c[0] for c in CASES])
def test_forward_matches_numpy(name, fn, ref, arrays):
    out = fn(*[g.ag_tensor(a) for a in arrays])
    np.testing.assert_allclose(out.numpy(), ref(*arrays), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name,fn,ref,arrays", CASES, ids=[c[0] for c in CASES])
def test_gradient_matches_finite_differences(name, fn, ref, arrays):
    xs = [g.ag_param(a) for a in arrays]
    if name == "mse":
        xs[1] = g.ag_tensor(arrays[1])  # ggmlR: mse gives no gradient to the target
    weights = g.ag_tensor(r(*ref(*arrays).shape))  # a random linear functional of the output
    ok, errs = g.ag_gradcheck(lambda: g.ag_sum(g.ag_mul(fn(*xs), weights)), xs, atol=2e-3, return_errors=True)
    assert ok, errs


def test_broadcast_gradients_reduce_over_the_broadcast_axis():
    a, col, row = g.ag_param(r(3, 4)), g.ag_param(r(3, 1)), g.ag_param(r(1, 4))
    with g.with_grad_tape():
        loss = g.ag_sum(g.ag_add(g.ag_add(a, col), row))
    grads = g.backward(loss)
    np.testing.assert_allclose(grads[col].numpy(), np.full((3, 1), 4.0))
    np.testing.assert_allclose(grads[row].numpy(), np.full((1, 4), 3.0))


def test_ggmlr_broadcast_errors():
    a, b = g.ag_tensor(r(3, 4)), g.ag_tensor(r(3, 1))
    with pytest.raises(g.GGMLError, match="only the second argument broadcasts"):
        g.ag_add(b, a)
    with pytest.raises(g.GGMLError, match="ag_scale"):
        g.ag_mul(a, 2)
    with pytest.raises(g.GGMLError, match="non-conformable"):
        g.ag_matmul(a, a)


def test_grad_accumulates_until_zero_grad_and_is_not_overcounted():
    x = g.ag_param(r(3, 4))
    for expected in (1, 2):
        with g.with_grad_tape():
            loss = g.ag_sum(g.ag_mul(x, x))  # x used twice: ggmlR's $grad would double-count
        g.backward(loss)
        np.testing.assert_allclose(x.grad.numpy(), expected * 2 * x.numpy(), rtol=1e-5)
    g.zero_grad([x])
    assert x.grad is None


def test_tape_is_disabled_after_an_exception():
    from ggmlpy.autograd.tape import TAPE
    x = g.ag_param(r(2, 2))
    with pytest.raises(RuntimeError):
        with g.with_grad_tape():
            g.ag_relu(x)
            raise RuntimeError("boom")
    assert not TAPE.enabled
    n = len(TAPE.nodes)
    g.ag_relu(x)
    assert len(TAPE.nodes) == n


def test_stale_pass_pool_handle_raises():
    x = g.ag_param(r(2, 2))
    with g.with_grad_tape():
        y = g.ag_relu(x)
    gen = y.st.gen
    with g.with_grad_tape():
        pass
    with pytest.raises(g.StaleTensorError, match=f"generation {gen}"):
        y.numpy()
    x.numpy()  # the persistent pool was not reset


def test_stale_persistent_pool_handle_raises_after_dtype_change():
    x = g.ag_param(r(2, 2))
    try:
        g.ag_dtype("f16")
        with pytest.raises(g.StaleTensorError, match="persistent pool"):
            x.numpy()
    finally:
        g.ag_dtype("f32")


def test_tape_report_counts_matmul_snapshots():
    W = [g.ag_param(r(16, 16)) for _ in range(3)]
    x = g.ag_tensor(r(16, 8))
    with g.with_grad_tape():
        h = x
        for w in W:
            h = g.ag_relu(g.ag_matmul(w, h))
    rep = g.tape_report()
    assert rep["total_bytes"] == g.tape_bytes() > 0
    assert max(rep["by_op"], key=lambda k: rep["by_op"][k]["bytes"]) == "matmul"
