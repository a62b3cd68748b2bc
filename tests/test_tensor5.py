"""Five-dim tensors at the low level (ggmlpy/core/tensor5.py): ggmlR's GGML_MAX_DIMS 5 on ggml 0.25.3's
four, ne3 and ne4 merged. Each op that takes them, against numpy, with the merged pair forced to each
place it can go; and the ops and shapes that would mix the merged dims, refused with a GGMLError."""
from __future__ import annotations

import numpy as np
import pytest

import ggmlpy as g
from ggmlpy import GGMLError
from ggmlpy.core.tensor5 import READS_FIVE, SAME_FIVE, Tensor5

F32 = g.GGML_TYPE_F32
RNG = np.random.default_rng(55)
NE = [3, 2, 4, 2, 3]  # ggml order; numpy's shape is the reverse


@pytest.fixture
def ctx():
    c = g.ggml_init(64 * 1024 * 1024)
    yield c
    g.ggml_free(c)


def _t(ctx, ne, lo=-2.0, hi=2.0):
    """A tensor of ggml dims ne (four or five) and its values as numpy (shape reversed)."""
    arr = RNG.uniform(lo, hi, ne[::-1]).astype(np.float32)
    t = g.ggml_new_tensor(ctx, F32, len(ne), ne)
    g.ggml_set_f32(t, arr)
    return t, arr


def _run(ctx, y):
    g.ggml_graph_compute(ctx, g.ggml_build_forward_expand(ctx, y))
    return g.ggml_get_f32(y)


def test_a_five_dim_tensor_reports_five_dims_and_strides(ctx):
    t = g.ggml_new_tensor_5d(ctx, F32, *NE)
    assert isinstance(t, Tensor5)
    assert list(t.ne) == NE and g.ggml_n_dims(t) == 5 and g.ggml_nelements(t) == 144
    assert g.ggml_tensor_nb(t) == [4, 12, 24, 96, 192]  # nb4 = nb3 * ne3: ggml's layout of a fifth dim
    assert g.ggml_nbytes(t) == 144 * 4
    assert g.ggml_get_f32(t).shape == tuple(NE[::-1])
    four = g.ggml_new_tensor(ctx, F32, 5, [3, 2, 4, 2, 1])  # ne4 = 1: an ordinary tensor
    assert not isinstance(four, Tensor5) and g.ggml_n_dims(four) == 4
    assert g.ggml_tensor_nb(four) == [4, 12, 24, 96, 192]


def test_dup_and_view_tensor_keep_five_dims(ctx):
    a, arr = _t(ctx, NE)
    assert list(g.ggml_dup_tensor(ctx, a).ne) == NE
    v = g.ggml_view_tensor(ctx, a)
    assert list(v.ne) == NE
    np.testing.assert_array_equal(g.ggml_get_f32(v), arr)


def test_reshape_5d_and_back(ctx):
    a, arr = _t(ctx, [6, 4, 6])
    r = g.ggml_reshape_5d(ctx, a, 3, 2, 4, 2, 3)
    assert list(r.ne) == [3, 2, 4, 2, 3]
    np.testing.assert_array_equal(_run(ctx, g.ggml_relu(ctx, r)), np.maximum(arr, 0).reshape(3, 2, 4, 2, 3))
    flat = g.ggml_reshape_1d(ctx, r, 144)
    assert not isinstance(flat, Tensor5)
    np.testing.assert_array_equal(_run(ctx, g.ggml_scale(ctx, flat, 2.0)), 2 * arr.reshape(-1))


@pytest.mark.parametrize("name", ["relu", "abs", "neg", "exp", "tanh", "sigmoid", "silu", "sqr", "sin", "floor"])
def test_unary_ops(ctx, name):
    a, arr = _t(ctx, NE)
    ref = {"relu": lambda x: np.maximum(x, 0), "abs": np.abs, "neg": np.negative, "exp": np.exp, "tanh": np.tanh,
           "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "silu": lambda x: x / (1 + np.exp(-x)), "sqr": np.square,
           "sin": np.sin, "floor": np.floor}[name](arr)
    y = getattr(g, f"ggml_{name}")(ctx, a)
    assert isinstance(y, Tensor5)
    np.testing.assert_allclose(_run(ctx, y), ref, rtol=1e-5, atol=1e-6)


def test_scale_clamp_and_row_ops(ctx):
    a, arr = _t(ctx, NE)
    np.testing.assert_allclose(_run(ctx, g.ggml_scale(ctx, a, 0.5)), 0.5 * arr)
    np.testing.assert_allclose(_run(ctx, g.ggml_clamp(ctx, a, -0.5, 0.5)), np.clip(arr, -0.5, 0.5))
    e = np.exp(arr - arr.max(-1, keepdims=True))
    np.testing.assert_allclose(_run(ctx, g.ggml_soft_max(ctx, a)), e / e.sum(-1, keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(_run(ctx, g.ggml_sum_rows(ctx, a)), arr.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_run(ctx, g.ggml_mean(ctx, a)), arr.mean(-1, keepdims=True), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_run(ctx, g.ggml_sum(ctx, a)).reshape(-1), [arr.sum()], rtol=1e-5)
    n = (arr - arr.mean(-1, keepdims=True)) / np.sqrt(arr.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(_run(ctx, g.ggml_norm(ctx, a, 1e-5)), n, rtol=1e-4, atol=1e-5)


# b's ggml dims against a's NE = [3, 2, 4, 2, 3]; which pair merges: 3 (ne3, ne4) where b's ne3 is a's or
# b's ne4 is 1, else an earlier pair (contiguous tensors are reshaped)
BROADCASTS = [NE, [3, 2, 4, 2, 1], [3, 2, 4, 1, 1], [3, 1, 1, 2, 3], [1, 2, 4, 1, 3], [3, 2, 1, 1, 3],
              [1, 1, 1, 1, 3], [3, 2, 4, 2], [3, 1, 4]]


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
@pytest.mark.parametrize("ne_b", BROADCASTS, ids=str)
def test_binary_ops_broadcast(ctx, op, ne_b):
    a, arr = _t(ctx, NE)
    b, brr = _t(ctx, ne_b, 0.5, 2.0)
    y = getattr(g, f"ggml_{op}")(ctx, a, b)
    assert list(y.ne) == NE
    ref = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}[op](
        arr, brr.reshape((1,) * (5 - brr.ndim) + brr.shape))
    np.testing.assert_allclose(_run(ctx, y), ref, rtol=1e-6)


def _fd_grad(f, x, eps=1e-3):
    """Central finite differences of the scalar f at x (float64)."""
    grad = np.zeros_like(x, dtype=np.float64)
    for i in np.ndindex(x.shape):
        d = np.zeros_like(x, dtype=np.float64)
        d[i] = eps
        grad[i] = (f(x + d) - f(x - d)) / (2 * eps)
    return grad


def test_softmax_and_silu_gradients_against_finite_differences(ctx):
    """ggml's backward ops on five dims (soft_max_ext_back, silu_back): the gradient of sum(w * f(x))."""
    ne = [3, 2, 2, 2, 2]
    x, xrr = _t(ctx, ne)
    w, wrr = _t(ctx, ne)
    x64, w64 = xrr.astype(np.float64), wrr.astype(np.float64)

    def softmax(z):
        e = np.exp(z - z.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)
    y = g.ggml_soft_max(ctx, x)
    gs = g.ggml_soft_max_ext_back(ctx, w, y, 1.0, 0.0)
    assert list(gs.ne) == ne
    np.testing.assert_allclose(_run(ctx, gs), _fd_grad(lambda z: (w64 * softmax(z)).sum(), x64), rtol=1e-3, atol=1e-4)
    gsi = g.ggml_silu_back(ctx, w, x)
    np.testing.assert_allclose(_run(ctx, gsi), _fd_grad(lambda z: (w64 * z / (1 + np.exp(-z))).sum(), x64),
                               rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("ne_a", BROADCASTS[1:], ids=str)
def test_repeat_and_repeat_back(ctx, ne_a):
    """repeat tiles a to b's five dims; repeat_back sums b's tiles back to a's (its gradient)."""
    a, arr = _t(ctx, ne_a)
    b, brr = _t(ctx, NE)
    a5 = arr.reshape((1,) * (5 - arr.ndim) + arr.shape)
    np.testing.assert_array_equal(_run(ctx, g.ggml_repeat(ctx, a, b)), np.broadcast_to(a5, brr.shape))
    like = g.ggml_new_tensor(ctx, F32, 5, list(ne_a) + [1] * (5 - len(ne_a)))
    axes = tuple(i for i in range(5) if a5.shape[i] == 1 and brr.shape[i] > 1)
    np.testing.assert_allclose(_run(ctx, g.ggml_repeat_back(ctx, b, like)).reshape(a5.shape),
                               brr.sum(axes, keepdims=True), rtol=1e-5, atol=1e-5)


def test_a_broadcast_that_repeats_every_pair_differently_is_refused(ctx):
    """b [2, 2, 2, 2, 2] tiled into a [4, 4, 4, 4, 4] (ggml's rule: b's dims divide a's): in every adjacent
    pair both dims repeat, so a merged pair would be tiled as one, not as two."""
    a = g.ggml_new_tensor(ctx, F32, 5, [4, 4, 4, 4, 4])
    b = g.ggml_new_tensor(ctx, F32, 5, [2, 2, 2, 2, 2])
    with pytest.raises(GGMLError, match="differently in every pair of adjacent dims"):
        g.ggml_add(ctx, a, b)
    with pytest.raises(GGMLError, match="does not repeat into a"):
        g.ggml_add(ctx, b, a)


def test_a_refold_needs_contiguous_tensors(ctx):
    a, _ = _t(ctx, NE)
    b = g.ggml_new_tensor(ctx, F32, 5, [3, 1, 1, 2, 3])
    pa = g.ggml_permute(ctx, a, 0, 2, 1, 3)  # ne1 and ne2 swapped: a view, [3, 4, 2, 2, 3]
    with pytest.raises(GGMLError, match="must be contiguous here"):  # merges dims 2 and 3
        g.ggml_add(ctx, pa, g.ggml_new_tensor(ctx, F32, 5, [3, 4, 2, 1, 3]))
    assert list(g.ggml_add(ctx, a, b).ne) == NE


@pytest.mark.parametrize("dim", range(5))
def test_concat_on_every_dim(ctx, dim):
    a, arr = _t(ctx, NE)
    b, brr = _t(ctx, NE)
    y = g.ggml_concat(ctx, a, b, dim)
    ne = list(NE)
    ne[dim] *= 2
    assert list(y.ne) == ne
    np.testing.assert_array_equal(_run(ctx, y), np.concatenate([arr, brr], 4 - dim))


def test_concat_along_ne3_of_a_view_copies_it_first(ctx):
    a, arr = _t(ctx, NE)
    b, brr = _t(ctx, [2, 3, 4, 2, 3])
    pb = g.ggml_transpose(ctx, b)  # [3, 2, 4, 2, 3], a view
    y = g.ggml_concat(ctx, a, pb, 3)
    np.testing.assert_array_equal(_run(ctx, y), np.concatenate([arr, np.swapaxes(brr, 3, 4)], 1))


def test_permute_transpose_and_cont_keep_ne4(ctx):
    a, arr = _t(ctx, NE)
    p = g.ggml_permute(ctx, a, 2, 0, 1, 3)  # ne0 -> 2, ne1 -> 0, ne2 -> 1; ne3, ne4 stay
    assert list(p.ne) == [2, 4, 3, 2, 3]
    np.testing.assert_array_equal(_run(ctx, g.ggml_cont(ctx, p)), np.transpose(arr, (0, 1, 4, 2, 3)))
    t = g.ggml_transpose(ctx, a)
    np.testing.assert_array_equal(_run(ctx, g.ggml_cont(ctx, t)), np.swapaxes(arr, 3, 4))
    with pytest.raises(GGMLError, match="dim 3 must stay"):
        g.ggml_permute(ctx, a, 0, 1, 3, 2)


@pytest.mark.parametrize("ne_a", [[4, 3, 2, 2, 3], [4, 3, 2, 1, 1], [4, 3, 1, 2, 3], [4, 3, 2]], ids=str)
def test_mul_mat_over_five_dim_batches(ctx, ne_a):
    a, arr = _t(ctx, ne_a)
    b, brr = _t(ctx, [4, 5, 2, 2, 3])
    y = g.ggml_mul_mat(ctx, a, b)
    assert list(y.ne) == [3, 5, 2, 2, 3]
    a5 = arr.reshape((1,) * (5 - arr.ndim) + arr.shape)
    ref = np.matmul(brr, np.swapaxes(a5, -1, -2))  # ggml: result [M, N] is t(a) %*% b per batch
    np.testing.assert_allclose(_run(ctx, y), ref, rtol=1e-5, atol=1e-5)


def test_mul_mat_whose_batches_would_mix_is_refused(ctx):
    a = g.ggml_new_tensor(ctx, F32, 5, [4, 3, 2, 2, 1])
    b = g.ggml_new_tensor(ctx, F32, 5, [4, 5, 2, 2, 3])
    with pytest.raises(GGMLError, match=r"a's batch dims 3, 4 \[2, 1\] must be b's \[2, 3\] or \[1, 1\]"):
        g.ggml_mul_mat(ctx, a, b)


def test_soft_max_ext_mask_with_five_dims(ctx):
    a, arr = _t(ctx, NE)
    m, mrr = _t(ctx, [3, 2])
    z = arr * 0.5 + mrr
    e = np.exp(z - z.max(-1, keepdims=True))
    np.testing.assert_allclose(_run(ctx, g.ggml_soft_max_ext(ctx, a, m, 0.5, 0.0)), e / e.sum(-1, keepdims=True),
                               rtol=1e-5)
    with pytest.raises(GGMLError, match="one plane"):
        g.ggml_soft_max_ext(ctx, a, g.ggml_new_tensor(ctx, F32, 4, [3, 2, 4, 2]), 1.0, 0.0)
    with pytest.raises(GGMLError, match="the mask must have four dims"):
        g.ggml_soft_max_ext(ctx, m, a, 1.0, 0.0)


def test_every_other_op_refuses_a_five_dim_tensor(ctx):
    a = g.ggml_new_tensor(ctx, F32, 5, NE)
    b = g.ggml_new_tensor(ctx, F32, 4, [3, 2, 4, 6])
    cases = [(lambda: g.ggml_pool_2d(ctx, a, g.GGML_OP_POOL_MAX, 2, 2, 2, 2, 0, 0), "ggml_pool_2d: a"),
             (lambda: g.ggml_get_rows(ctx, a, g.ggml_new_tensor_1d(ctx, g.GGML_TYPE_I32, 2)), "ggml_get_rows: a"),
             (lambda: g.ggml_acc(ctx, b, a, 0, 0, 0, 0), "ggml_acc: b"),
             (lambda: g.ggml_view_1d(ctx, a, 4, 0), "ggml_view_1d: a"),
             (lambda: g.ggml_cpy(ctx, a, b), "ggml_cpy: a"),
             (lambda: g.ggml_conv_2d(ctx, b, a), "ggml_conv_2d: b")]
    for call, where in cases:
        with pytest.raises(GGMLError, match=rf"{where} has five dims \[3, 2, 4, 2, 3\]; ggml 0.25.3 has four"):
            call()


def test_the_lists_name_public_ops():
    assert all(callable(getattr(g, n)) for n in SAME_FIVE | READS_FIVE)
