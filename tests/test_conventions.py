"""The Python conventions ag tensors, layers and optimizers follow: methods and
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


def test_backward_method_is_backward_of_the_loss():
    w = g.ag_param(r(3, 2))
    with g.with_grad_tape():
        loss = g.ag_sum(g.ag_mul(w, w))
    grads = loss.backward()
    np.testing.assert_allclose(grads[w].numpy(), 2 * w.numpy(), rtol=1e-6)
    np.testing.assert_allclose(w.grad.numpy(), 2 * w.numpy(), rtol=1e-6)


def test_backward_method_follows_pytorch_for_a_non_scalar_loss():
    """loss.backward() on a loss of several elements needs grad= (PyTorch's rule); ggmlR's
    backward(loss) seeds every element with 1, as before."""
    w = g.ag_param(r(3, 2))
    with g.with_grad_tape():
        out = g.ag_mul(w, w)
    with pytest.raises(g.GGMLError, match=r"only for a loss of one element; this one has shape \[3, 2\]"):
        out.backward()
    assert w.grad is None   # nothing was accumulated
    seed = r(3, 2)
    grads = out.backward(grad=seed)
    np.testing.assert_allclose(grads[w].numpy(), 2 * w.numpy() * seed, rtol=1e-6)
    with g.with_grad_tape():
        out = g.ag_mul(w, w)
    np.testing.assert_allclose(g.backward(out)[w].numpy(), 2 * w.numpy(), rtol=1e-6)   # ggmlR's form


# -- indexing, len, iteration ---------------------------------------------------------------------------
def test_indexing_follows_numpy_but_stays_a_matrix():
    a = r(3, 4)
    t = g.ag_tensor(a)
    a32 = a.astype(np.float32)
    np.testing.assert_array_equal(t[0].numpy(), a32[0:1])
    np.testing.assert_array_equal(t[-1].numpy(), a32[2:3])
    np.testing.assert_array_equal(t[1, 2].numpy(), a32[1:2, 2:3])
    np.testing.assert_array_equal(t[:, 1:3].numpy(), a32[:, 1:3])
    np.testing.assert_array_equal(t[-2:, -1].numpy(), a32[-2:, 3:4])
    assert t[:, :] is t
    assert len(t) == 3
    rows = list(t)
    assert len(rows) == 3 and all(row.shape == (1, 4) for row in rows)
    np.testing.assert_array_equal(np.vstack([row.numpy() for row in rows]), a32)


@pytest.mark.parametrize("key,exc", [(3, IndexError), (-4, IndexError), ((0, 4), IndexError),
                                     (slice(0, 3, 2), IndexError), (slice(2, 1), IndexError),
                                     ([0, 1], IndexError), ((0, 0, 0), IndexError), (True, IndexError)])
def test_bad_indices_raise_index_error(key, exc):
    t = g.ag_tensor(r(3, 4))
    with pytest.raises(exc):
        t[key]


def test_indexing_carries_gradients():
    x = g.ag_param(r(3, 4))
    w = g.ag_tensor(r(3, 2, seed=1))
    assert g.ag_gradcheck(lambda: g.ag_sum(g.ag_mul(x[:, 1:3], w)), [x])
    assert g.ag_gradcheck(lambda: g.ag_sum(g.ag_mul(x[-1], x[0])), [x])
    with g.with_grad_tape():
        loss = g.ag_sum(x[1])
    grads = loss.backward()
    expect = np.zeros((3, 4), np.float32)
    expect[1] = 1
    np.testing.assert_array_equal(grads[x].numpy(), expect)


def test_ag_slice_takes_negative_ints_as_python_does():
    a = r(3, 4)
    np.testing.assert_array_equal(g.ag_slice(g.ag_tensor(a), -1, None).numpy(), a[2:3].astype(np.float32))
    with pytest.raises(g.GGMLError, match="out of range"):
        g.ag_slice(g.ag_tensor(a), None, 4)


# -- operators with numpy arrays and scalars ----------------------------------------------------------------
def test_operators_take_arrays_and_numbers_on_both_sides():
    a, col, row = r(3, 4), r(3, 1, seed=1), r(1, 4, seed=2)
    t = g.ag_tensor(a)
    f32 = lambda v: np.asarray(v, np.float32)  # noqa: E731
    cases = [
        (t + col, a + col), (col + t, a + col), (t + row, a + row), (a + t, 2 * a),
        (t - col, a - col), (col - t, col - a), (t * a, a * a), (a * t, a * a), (t / 2, a / 2),
        (2 + t, a + 2), (t + 2, a + 2), (2 - t, 2 - a), (t - 2, a - 2), (2 * t, 2 * a), (t * 2, 2 * a),
        (np.float32(2) * t, 2 * a), (t * np.float64(0.5), a / 2), (np.int64(3) + t, a + 3),
        (1 / (t * t + 1), 1 / (a * a + 1)), (row.T @ t[0], row.T @ a[0:1]), (t @ a.T, a @ a.T),
    ]
    for got, want in cases:
        assert got.dtype == "f32"
        np.testing.assert_allclose(got.numpy(), f32(want), rtol=2e-6, atol=2e-6)


def test_array_operands_are_converted_to_the_tensors_dtype():
    t = g.ag_tensor(np.zeros((2, 1)))
    third = np.array([[1 / 3], [2 ** 24 + 1]])                    # float64
    np.testing.assert_array_equal((t + third).numpy(), third.astype(np.float32))
    big = np.array([2 ** 24 + 1, 7], dtype=np.int64)             # a 1-D array is a column
    np.testing.assert_array_equal((t + big).numpy(), big.astype(np.float32).reshape(2, 1))
    from ggmlpy.tensor import _operand
    h = g.ag_tensor(np.zeros((2, 1)), dtype="f16")
    assert _operand(np.array([0.1, 2.0]), h).dtype == "f16"   # stored as the tensor it meets


def test_array_operands_are_constants_and_gradients_reach_the_tensor():
    x = g.ag_param(r(3, 4))
    c = r(3, 4, seed=5)
    with g.with_grad_tape():
        loss = g.ag_sum(c * x + 1.5)
    grads = loss.backward()
    np.testing.assert_allclose(grads[x].numpy(), c.astype(np.float32), rtol=1e-6)
    assert list(grads) == [x.id]  # the converted array is a constant: no gradient of its own


def test_shapes_that_do_not_broadcast_still_raise():
    with pytest.raises(g.GGMLError, match="broadcast"):
        g.ag_tensor(r(3, 4)) + np.ones((2, 4))


# -- numpy(), data ----------------------------------------------------------------------------------------
def test_numpy_returns_the_tensors_own_dtype_and_data_stays_float64():
    a = r(3, 4)
    t = g.ag_tensor(a)
    assert t.numpy().dtype == np.float32 and t.numpy().shape == (3, 4)
    assert np.asarray(t).dtype == np.float32
    assert t.data.dtype == np.float64                        # ggmlR's $data is an R double matrix
    np.testing.assert_array_equal(t.data, a.astype(np.float32).astype(np.float64))
    assert g.ag_tensor(a, dtype="f16").numpy().dtype == np.float16
    assert g.ag_tensor(a, dtype="bf16").numpy().dtype == np.float32   # numpy has no bfloat16
    assert g.ag_tensor(np.arange(3), dtype="i32").numpy().dtype == np.int32


# -- repr -----------------------------------------------------------------------------------------------
def test_tensor_repr_shows_shape_dtype_device_values_and_requires_grad():
    p = g.ag_param(np.arange(6.0).reshape(2, 3))
    text = repr(p)
    assert text.startswith("ag_tensor([[0., 1., 2.],")
    for part in ("shape=[2, 3]", "dtype=f32", f"device={p.device}", "requires_grad=True"):
        assert part in text
    assert "requires_grad" not in repr(g.ag_tensor(np.ones((2, 2))))
    big = repr(g.ag_tensor(np.ones((100, 50))))
    assert "..." in big and len(big.splitlines()) < 20       # abbreviated as numpy does


def test_model_repr_lists_layers_shapes_and_parameter_counts():
    model = g.ag_sequential(g.ag_linear(4, 8, "relu"), g.ag_dropout(0.25), g.ag_linear(8, 3))
    text = repr(model)
    assert text.splitlines()[0] == "ag_sequential("
    assert "(layer1): ag_linear(4, 8, activation='relu')  [W 8x4, b 8x1: 40 parameters]" in text
    assert "(layer2): ag_dropout(rate=0.25)" in text
    assert "(layer3): ag_linear(8, 3)  [W 3x8, b 3x1: 27 parameters]" in text
    assert text.splitlines()[-1] == "total: 3 layers, 67 trainable parameters in 4 tensors"
    assert model.num_parameters() == 67


# -- modes, optimizers, predict / accuracy ------------------------------------------------------------------
def test_train_and_eval_methods_switch_recursively_and_return_the_model():
    inner = g.ag_sequential(g.ag_dropout(0.5))
    model = g.ag_sequential(g.ag_linear(2, 2), inner)
    assert model.eval() is model
    assert not model.training and not inner.layers[0].training
    assert model.train() is model and inner.layers[0].training
    assert not model.train(False).training


def test_optimizers_accept_a_model():
    g.manual_seed(0)
    model = g.ag_sequential(g.ag_linear(3, 2))
    for make in (g.optimizer_sgd, g.optimizer_adam, g.optimizer_adamw):
        assert make(model, lr=0.1).params == model.parameters()
    x, y = g.ag_tensor(r(3, 5)), g.ag_tensor(r(2, 5, seed=1))
    opt = g.optimizer_sgd(model, lr=0.1)
    before = model.layers[0].W.numpy()
    with g.with_grad_tape():
        loss = g.ag_mse_loss(model(x), y)
    grads = loss.backward()
    assert g.clip_grad_norm(model, grads, 1e9) > 0
    opt.step(grads)
    np.testing.assert_allclose(model.layers[0].W.numpy(), before - 0.1 * grads[model.layers[0].W].numpy(), rtol=1e-5)


def test_predict_and_accuracy():
    model = g.ag_sequential(g.ag_linear(3, 3), g.ag_dropout(0.9))
    model.layers[0].W.data = np.eye(3)
    model.layers[0].b.data = np.zeros((3, 1))
    x = r(3, 10)
    labels = x.argmax(axis=0)
    out = g.ag_predict(model, x, batch_size=4)                # dropout is off while predicting
    assert out.dtype == np.float32 and out.shape == (3, 10)
    np.testing.assert_allclose(out, x.astype(np.float32), rtol=1e-6)
    assert model.training                                     # the mode is restored
    assert g.ag_accuracy(model, x, labels) == 1.0
    assert g.ag_accuracy(model, g.ag_tensor(x), np.eye(3)[:, labels], batch_size=3) == 1.0   # one-hot
    wrong = labels.copy()
    wrong[:4] = (wrong[:4] + 1) % 3
    assert g.ag_accuracy(model, x, wrong) == pytest.approx(0.6)
    with pytest.raises(g.GGMLError, match="labels"):
        g.ag_accuracy(model, x, labels[:5])


# -- clear errors and warnings -------------------------------------------------------------------------------
def test_pytorch_layout_input_gets_a_hint_about_columns():
    layer = g.ag_linear(4, 3)
    with pytest.raises(g.GGMLError, match=r"samples as columns.*\.T"):
        layer(g.ag_tensor(r(8, 4)))                           # [batch, features]
    with pytest.raises(g.GGMLError, match=r"samples as columns.*\.T"):
        g.ag_mse_loss(g.ag_tensor(r(3, 8)), g.ag_tensor(r(8, 3)))
    with pytest.raises(g.GGMLError, match=r"logits\.T"):
        g.ag_softmax_cross_entropy_loss(g.ag_tensor(r(8, 3)), np.zeros(8, dtype=int))


def test_softmax_cross_entropy_over_one_class_warns():
    with pytest.warns(RuntimeWarning, match="one class") as rec:
        loss = g.ag_softmax_cross_entropy_loss(g.ag_tensor(r(1, 5)), g.ag_tensor(np.ones((1, 5))))
    assert loss.item() == pytest.approx(0.0, abs=1e-6)
    assert rec[0].filename == __file__


def test_loop_variable_warning_points_at_the_users_line():
    layers = [g.ag_linear(3, 3, "tanh") for _ in range(3)]
    x, y = g.ag_tensor(r(3, 4)), g.ag_tensor(r(3, 4, seed=1))
    with g.with_grad_tape():
        h = x
        for lyr in layers:
            h = g.ag_checkpoint(lambda t: lyr(t), h); made = _line()  # noqa: E702
        loss = g.ag_mse_loss(h, y)
    with pytest.warns(RuntimeWarning, match="loop variable") as rec:
        g.backward(loss); called = _line()  # noqa: E702
    w = rec[0]
    assert (w.filename, w.lineno) == (__file__, called)
    assert f"{__file__}:{made}" in str(w.message) and "lyr=lyr" in str(w.message)


def _line():
    import sys
    return sys._getframe(1).f_lineno
