"""The Keras-like model API (ggmlpy.keras): every layer's forward pass against the numpy
reference (scripts/keras_reference.py), its gradients against finite differences (one
optimizer step of ggml_fit against train_reference), save/load, callbacks, ggml_opt_*,
and bad input."""
import math
import pathlib
import sys

import numpy as np
import pytest

import ggmlpy as g
from ggmlpy.errors import GGMLError

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "scripts"))
import keras_reference as ref  # noqa: E402
import parity_keras as pk  # noqa: E402

RNG = np.random.default_rng(7)


def _seq(*layers, input_shape):
    m = g.ggml_model_sequential()
    for i, (fn, kw) in enumerate(layers):
        if i == 0:
            kw = dict(kw, input_shape=input_shape)
        m = fn(m, **kw)
    return m


def _randomize(model, scale=0.5):
    """Non-trivial weights (biases, gammas, running variances and recurrent kernels included)."""
    for l in model._all_layers():
        for k, v in l.weights.items():
            shift = 1.0 if k in ("gamma", "running_var") else 0.0
            l.weights[k] = (RNG.uniform(-scale, scale, v.shape) + shift).astype(np.float32)


IMG = (6, 5, 2)   # H, W, C
SEQ = (4, 3)      # T, C
LAYER_CASES = {
    "dense_relu": ([(g.ggml_layer_dense, dict(units=4, activation="relu"))], (5,)),
    "dense_sigmoid": ([(g.ggml_layer_dense, dict(units=3, activation="sigmoid"))], (5,)),
    "dense_tanh": ([(g.ggml_layer_dense, dict(units=3, activation="tanh"))], (5,)),
    "dense_softmax": ([(g.ggml_layer_dense, dict(units=3, activation="softmax"))], (5,)),
    "dense_silu": ([(g.ggml_layer_dense, dict(units=3, activation="silu"))], (5,)),
    "dense_linear": ([(g.ggml_layer_dense, dict(units=3))], (5,)),
    "batch_norm": ([(g.ggml_layer_dense, dict(units=4)), (g.ggml_layer_batch_norm, dict(eps=1e-3)),
                    (g.ggml_layer_dense, dict(units=2))], (3,)),
    "true_batch_norm": ([(g.ggml_layer_dense, dict(units=4)), (g.ggml_layer_batch_norm, dict(mode="batch")),
                         (g.ggml_layer_dense, dict(units=2))], (3,)),
    "true_batch_norm_image": ([(g.ggml_layer_conv_2d, dict(filters=2, kernel_size=2)),
                               (g.ggml_layer_batch_norm, dict(mode="batch")), (g.ggml_layer_flatten, {}),
                               (g.ggml_layer_dense, dict(units=2))], IMG),
    "dropout": ([(g.ggml_layer_dense, dict(units=4)), (g.ggml_layer_dropout, dict(rate=0.3)),
                 (g.ggml_layer_dense, dict(units=2))], (3,)),
    "conv_2d_valid": ([(g.ggml_layer_conv_2d, dict(filters=3, kernel_size=(3, 2), activation="relu")),
                       (g.ggml_layer_flatten, {}), (g.ggml_layer_dense, dict(units=2))], IMG),
    "conv_2d_same_strided": ([(g.ggml_layer_conv_2d, dict(filters=2, kernel_size=3, strides=2, padding="same")),
                              (g.ggml_layer_flatten, {}), (g.ggml_layer_dense, dict(units=2))], IMG),
    "conv_2d_same_even_kernel_strided": ([(g.ggml_layer_conv_2d, dict(filters=2, kernel_size=(2, 4), strides=(2, 3),
                                                                         padding="same")),
                                          (g.ggml_layer_flatten, {}), (g.ggml_layer_dense, dict(units=2))], IMG),
    "conv_2d_same_even_kernel": ([(g.ggml_layer_conv_2d, dict(filters=2, kernel_size=2, padding="same")),
                                  (g.ggml_layer_flatten, {}), (g.ggml_layer_dense, dict(units=2))], IMG),
    "max_pooling": ([(g.ggml_layer_conv_2d, dict(filters=2, kernel_size=2)),
                     (g.ggml_layer_max_pooling_2d, dict(pool_size=2)), (g.ggml_layer_flatten, {}),
                     (g.ggml_layer_dense, dict(units=2))], IMG),
    "global_avg": ([(g.ggml_layer_conv_2d, dict(filters=3, kernel_size=2)),
                    (g.ggml_layer_global_average_pooling_2d, {}), (g.ggml_layer_dense, dict(units=2))], IMG),
    "global_max": ([(g.ggml_layer_conv_2d, dict(filters=3, kernel_size=2)),
                    (g.ggml_layer_global_max_pooling_2d, {}), (g.ggml_layer_dense, dict(units=2))], IMG),
    "image_batch_norm": ([(g.ggml_layer_conv_2d, dict(filters=2, kernel_size=2)), (g.ggml_layer_batch_norm, {}),
                          (g.ggml_layer_flatten, {}), (g.ggml_layer_dense, dict(units=2))], IMG),
    "conv_1d": ([(g.ggml_layer_conv_1d, dict(filters=3, kernel_size=2, activation="relu")),
                 (g.ggml_layer_flatten, {}), (g.ggml_layer_dense, dict(units=2))], (6, 2)),
    "conv_1d_same": ([(g.ggml_layer_conv_1d, dict(filters=2, kernel_size=3, padding="same")),
                      (g.ggml_layer_flatten, {}), (g.ggml_layer_dense, dict(units=2))], (5, 3)),
    "conv_1d_same_even_kernel": ([(g.ggml_layer_conv_1d, dict(filters=2, kernel_size=4, padding="same")),
                                  (g.ggml_layer_flatten, {}), (g.ggml_layer_dense, dict(units=2))], (6, 2)),
    "conv_1d_same_even_kernel_strided": ([(g.ggml_layer_conv_1d, dict(filters=2, kernel_size=2, strides=2,
                                                                         padding="same")),
                                          (g.ggml_layer_flatten, {}), (g.ggml_layer_dense, dict(units=2))], (5, 3)),
    "conv_1d_stacked": ([(g.ggml_layer_conv_1d, dict(filters=3, kernel_size=2, activation="tanh")),
                         (g.ggml_layer_conv_1d, dict(filters=2, kernel_size=2, strides=2)),
                         (g.ggml_layer_flatten, {}), (g.ggml_layer_dense, dict(units=2))], (7, 2)),
    "conv_2d_stacked": ([(g.ggml_layer_conv_2d, dict(filters=2, kernel_size=2, activation="relu")),
                         (g.ggml_layer_max_pooling_2d, dict(pool_size=2)),
                         (g.ggml_layer_conv_2d, dict(filters=3, kernel_size=(1, 2), padding="same")),
                         (g.ggml_layer_global_average_pooling_2d, {}), (g.ggml_layer_dense, dict(units=2))], IMG),
    "conv_1d_then_lstm": ([(g.ggml_layer_conv_1d, dict(filters=3, kernel_size=2, activation="tanh")),
                           (g.ggml_layer_lstm, dict(units=2)), (g.ggml_layer_dense, dict(units=2))], (5, 2)),
    "stacked_recurrent": ([(g.ggml_layer_lstm, dict(units=3, return_sequences=True)),
                           (g.ggml_layer_gru, dict(units=2)), (g.ggml_layer_dense, dict(units=2))], SEQ),
    "lstm": ([(g.ggml_layer_lstm, dict(units=3)), (g.ggml_layer_dense, dict(units=2))], SEQ),
    "lstm_seq": ([(g.ggml_layer_lstm, dict(units=2, return_sequences=True)), (g.ggml_layer_flatten, {}),
                  (g.ggml_layer_dense, dict(units=2))], SEQ),
    "gru": ([(g.ggml_layer_gru, dict(units=3)), (g.ggml_layer_dense, dict(units=2))], SEQ),
    "gru_relu_seq": ([(g.ggml_layer_gru, dict(units=2, activation="relu", return_sequences=True)),
                      (g.ggml_layer_flatten, {}), (g.ggml_layer_dense, dict(units=2))], SEQ),
}


def ref_loss(m):
    """The loss ggml_fit trains, for train_reference: on a softmax output the true CE."""
    if m.fit_loss == "cross_entropy" and getattr(m._output_layers()[-1], "activation", None) == "softmax":
        return "cross_entropy_of_probabilities"
    return m.fit_loss


def _data(shape, n=5):
    return RNG.uniform(-1, 1, (n,) + tuple(shape))


@pytest.mark.parametrize("name", sorted(LAYER_CASES))
def test_layer_forward_matches_numpy(name):
    layers, shape = LAYER_CASES[name]
    m = g.ggml_compile(_seq(*layers, input_shape=shape), loss="mse")
    _randomize(m)
    x = _data(shape)
    got = g.ggml_predict(m, x, batch_size=3)   # a zero-padded remainder batch too
    np.testing.assert_allclose(got, pk.reference_predict(m, x)[0], rtol=1e-5, atol=1e-5)


@pytest.fixture(params=[False, True], ids=["static_graphs", "caller_graphs"])
def graphs(request, monkeypatch):
    """Train on ggml_opt's static graphs, or on the graphs fit builds itself every step (the
    path of models too big for the static ones), forced here for small models."""
    monkeypatch.setattr(g.keras.engine, "FORCE_CALLER_GRAPHS", request.param)
    return request.param


@pytest.mark.parametrize("name", sorted(LAYER_CASES))
@pytest.mark.parametrize("loss,optimizer", [("mse", "sgd"), ("categorical_crossentropy", "adam")])
def test_layer_gradients_match_finite_differences(name, loss, optimizer, graphs):
    """Two epochs of full-batch ggml_fit against the same steps with finite-difference gradients."""
    layers, shape = LAYER_CASES[name]
    m = g.ggml_compile(_seq(*layers, input_shape=shape), loss=loss, optimizer=optimizer, lr=0.05)
    _randomize(m)
    x = _data(shape, 4)
    k = int(np.prod(m._output_shapes()[0]))
    y = np.eye(k)[RNG.integers(0, k, 4)]
    before = m.get_weights()
    m._record_order = True
    h = m.fit(x, y, epochs=2, batch_size=4)

    def forward(W, xb):
        return pk.reference_predict(m, xb, W, training=True)[-1]
    trainable = {ln: {k: v for k, v in ps.items() if not k.startswith("running_")} for ln, ps in before.items()}
    rows, W = ref.train_reference(forward, before, list(before), x, y, h.batch_order, 4, 4, 2,
                                  ref_loss(m), m.ggml_optimizer, lr=0.05, only=trainable)
    np.testing.assert_allclose(h["train_loss"], [r[0] for r in rows], rtol=1e-4, atol=1e-5)
    after = m.get_weights()
    for ln, ps in W.items():
        for k, v in ps.items():
            if k.startswith("running_"):   # state, checked in test_true_batch_norm_running_averages
                continue
            if name.startswith("true_batch_norm") and optimizer == "adam" and k == "bias" \
                    and ln in ("dense_1", "conv_2d_1"):
                # a bias before a true batch norm has gradient 0 exactly (the batch mean removes
                # it): Adam normalises whatever rounding noise both sides see. SGD checks it.
                continue
            np.testing.assert_allclose(after[ln][k], v, rtol=1e-3, atol=2e-5, err_msg=f"{ln}.{k}")


def _functional_model():
    a = g.ggml_input(shape=3, name="a")
    b = g.ggml_input(shape=2, name="b")
    shared = g.ggml_dense(3, activation="tanh", name="shared")
    ha = g.ggml_apply(g.ggml_layer_dense(a, 2, name="pa"), shared)
    hb = g.ggml_apply(g.ggml_layer_dense(b, 2, name="pb"), shared)
    s = g.ggml_layer_add([ha, hb], name="sum")
    c = g.ggml_layer_concatenate([s, ha], axis=0, name="cat")
    out = g.ggml_layer_dense(c, 2, activation="softmax", name="out")
    return g.ggml_model([a, b], out)


def test_functional_shared_layer_gradients_add_up():
    m = g.ggml_compile(_functional_model(), optimizer="sgd", lr=0.1)
    _randomize(m)
    xa, xb = _data((3,), 6), _data((2,), 6)
    y = np.eye(2)[RNG.integers(0, 2, 6)]
    np.testing.assert_allclose(g.ggml_predict(m, [xa, xb], 3), pk.reference_predict(m, [xa, xb])[0],
                               rtol=1e-5, atol=1e-6)
    before = m.get_weights()
    m._record_order = True
    h = m.fit([xa, xb], y, epochs=3, batch_size=3)
    assert h.fit_path == "multi_input" and h.batch_order[0] == list(range(6))

    def forward(W, xb_):
        return pk.reference_predict(m, xb_, W, training=True)[-1]
    rows, W = ref.train_reference(forward, before, list(before), [xa, xb], y, h.batch_order, 3, 6, 3,
                                  ref_loss(m), "sgd", lr=0.1)
    np.testing.assert_allclose(h["train_loss"], [r[0] for r in rows], rtol=1e-4, atol=1e-5)
    for ln, ps in W.items():
        for k, v in ps.items():
            np.testing.assert_allclose(m.get_weights()[ln][k], v, rtol=1e-3, atol=2e-5)


def test_multi_output_predicts_every_output():
    x = g.ggml_input(shape=3)
    t = g.ggml_layer_dense(x, 4, activation="relu", name="trunk")
    h1 = g.ggml_layer_dense(t, 2, activation="softmax", name="h1")
    h2 = g.ggml_layer_dense(t, 1, name="h2")
    m = g.ggml_compile(g.ggml_model(x, [h1, h2]), loss="mse")
    xs = _data((3,), 4)
    p1, p2 = g.ggml_predict(m, xs, 4)
    r1, r2 = pk.reference_predict(m, xs)
    np.testing.assert_allclose(p1, r1, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(p2, r2, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("k,stride,length", [(2, 1, 5), (4, 1, 6), (4, 2, 7), (6, 3, 8)])
def test_conv_1d_same_even_kernel_pads_like_keras(k, stride, length):
    """TensorFlow/Keras 'same': ceil(L/s) outputs, total = (out-1)*s + K - L zeros, total//2
    before the sequence (for stride 1, (K-1)//2) and the rest after. A kernel that picks tap j
    reads x[i*s + j - before], which shows where the zeros went."""
    out_len = -(-length // stride)
    before = max((out_len - 1) * stride + k - length, 0) // 2
    x = np.arange(1, length + 1, dtype=np.float64).reshape(1, length, 1)
    for j in range(k):
        m = g.ggml_compile(_seq((g.ggml_layer_conv_1d, dict(filters=1, kernel_size=k, strides=stride,
                                                            padding="same")), input_shape=(length, 1)), loss="mse")
        w = np.zeros((1, k, 1), np.float32)
        w[0, j, 0] = 1.0
        m.set_weights({"conv_1d_1": {"kernel": w, "bias": np.zeros(1, np.float32)}})
        got = g.ggml_predict(m, x).reshape(-1)
        src = np.arange(out_len) * stride + j - before
        want = np.where((src >= 0) & (src < length), src + 1, 0)
        np.testing.assert_array_equal(got, want)


def _two_head_model():
    x = g.ggml_input(shape=3, name="x")
    t = g.ggml_layer_dense(x, 4, activation="tanh", name="trunk")
    h1 = g.ggml_layer_dense(t, 3, activation="softmax", name="h1")
    h2 = g.ggml_layer_dense(t, 2, name="h2")
    return g.ggml_model(x, [h1, h2])


def _multi_reference_loss(m, W, x, ys, loss_weights, sw):
    """sum_i w_i * loss_i by the numpy reference: the true CE of the softmax head, the mse of
    the linear head, each a (sample-weighted) batch mean."""
    p1, p2 = pk.reference_predict(m, x, W, training=True)
    l1 = float(np.mean(sw * -np.sum(ys[0] * np.log(p1), axis=1)))
    l2 = float(np.mean(sw * np.mean((p2 - ys[1]) ** 2, axis=1)))
    return loss_weights[0] * l1 + loss_weights[1] * l2, (l1, l2)


@pytest.mark.parametrize("optimizer,weighted", [("sgd", False), ("adam", False), ("sgd", True)])
def test_multi_output_fit_trains_every_output(optimizer, weighted, graphs):
    """The loss fit minimises is the weighted sum of every output's loss: two full-batch epochs
    against the same steps with finite-difference gradients of that sum (numpy forward)."""
    m = g.ggml_compile(_two_head_model(), optimizer=optimizer, lr=0.05,
                       loss={"h1": "categorical_crossentropy", "h2": "mse"}, loss_weights={"h1": 1.0, "h2": 0.5})
    _randomize(m)
    x = _data((3,), 6)
    ys = [np.eye(3)[RNG.integers(0, 3, 6)], RNG.uniform(-1, 1, (6, 2))]
    sw = RNG.uniform(0.5, 2.0, 6) if weighted else np.ones(6)
    before = m.get_weights()
    h = m.fit(x, ys, epochs=2, batch_size=6, sample_weight=sw if weighted else None)

    W = {n: {k: v.astype(np.float64) for k, v in ps.items()} for n, ps in before.items()}
    mom = {n: {k: np.zeros_like(v) for k, v in ps.items()} for n, ps in W.items()}
    vel = {n: {k: np.zeros_like(v) for k, v in ps.items()} for n, ps in W.items()}
    totals, heads = [], []
    for t in range(1, 3):
        total, per = _multi_reference_loss(m, W, x, ys, (1.0, 0.5), sw)
        totals.append(total)
        heads.append(per)
        grad = ref.fd_grad(lambda W_: _multi_reference_loss(m, W_, x, ys, (1.0, 0.5), sw)[0], W)
        for n in W:
            for k in W[n]:
                if optimizer == "sgd":
                    W[n][k] -= 0.05 * grad[n][k]
                else:
                    mom[n][k] = 0.9 * mom[n][k] + 0.1 * grad[n][k]
                    vel[n][k] = 0.999 * vel[n][k] + 0.001 * grad[n][k] ** 2
                    W[n][k] -= 0.05 * (mom[n][k] / (1 - 0.9 ** t)) / (np.sqrt(vel[n][k] / (1 - 0.999 ** t)) + 1e-8)
    np.testing.assert_allclose(h["train_loss"], totals, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(h["train_h1_loss"], [p[0] for p in heads], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(h["train_h2_loss"], [p[1] for p in heads], rtol=1e-4, atol=1e-6)
    assert h.outputs == ["h1", "h2"] and h["val_h1_loss"] == [None, None]
    after = m.get_weights()
    for n, ps in W.items():
        for k, v in ps.items():
            np.testing.assert_allclose(after[n][k], v, rtol=1e-3, atol=2e-5, err_msg=f"{n}.{k}")
            assert not np.allclose(after[n][k], before[n][k]), f"{n}.{k} did not train"


@pytest.mark.parametrize("outputs", ["both", "p_only"])
def test_cross_entropy_on_a_softmax_output_that_feeds_another_layer(outputs):
    """A softmax output also read by another layer keeps its softmax for that reader; fit's
    cross-entropy is still the true -sum y log p (no second softmax), against finite differences."""
    x = g.ggml_input(shape=3, name="x")
    p = g.ggml_layer_dense(g.ggml_layer_dense(x, 4, activation="tanh", name="trunk"), 3, activation="softmax", name="p")
    q = g.ggml_layer_dense(p, 2, name="q")
    m = g.ggml_compile(g.ggml_model(x, [p, q]), optimizer="sgd", lr=0.1,
                       loss={"p": "categorical_crossentropy", "q": "mse"} if outputs == "both"
                       else {"p": "categorical_crossentropy"})
    _randomize(m)
    xs = _data((3,), 6)
    ys = [np.eye(3)[RNG.integers(0, 3, 6)], RNG.uniform(-1, 1, (6, 2))]
    wq = 1.0 if outputs == "both" else 0.0

    def total(W):
        pp, qq = pk.reference_predict(m, xs, W, training=True)
        return float(np.mean(-np.sum(ys[0] * np.log(pp), axis=1))) + wq * float(np.mean((qq - ys[1]) ** 2))
    W = {n: {k: v.astype(np.float64) for k, v in ps.items()} for n, ps in m.get_weights().items()}
    losses = []
    for _ in range(2):
        losses.append(total(W))
        grad = ref.fd_grad(total, W)
        for n in W:
            for k in W[n]:
                W[n][k] -= 0.1 * grad[n][k]
    h = m.fit(xs, ys if outputs == "both" else [ys[0], None], epochs=2, batch_size=6)
    np.testing.assert_allclose(h["train_loss"], losses, rtol=1e-4, atol=1e-6)
    after = m.get_weights()
    for n, ps in W.items():
        for k, v in ps.items():
            np.testing.assert_allclose(after[n][k], v, rtol=1e-3, atol=2e-5, err_msg=f"{n}.{k}")


def test_multi_output_evaluate_and_validation():
    m = g.ggml_compile(_two_head_model(), loss=["categorical_crossentropy", "mse"], loss_weights=[2.0, 1.0])
    _randomize(m)
    x = _data((3,), 8)
    ys = [np.eye(3)[RNG.integers(0, 3, 8)], RNG.uniform(-1, 1, (8, 2))]
    p1, p2 = pk.reference_predict(m, x)
    l1 = float(np.mean(-np.sum(ys[0] * np.log(p1), axis=1)))
    l2 = float(np.mean((p2 - ys[1]) ** 2))
    e = g.ggml_evaluate(m, x, {"h1": ys[0], "h2": ys[1]}, batch_size=4)
    assert math.isclose(e["h1_loss"], l1, rel_tol=1e-5) and math.isclose(e["h2_loss"], l2, rel_tol=1e-5)
    assert math.isclose(e["loss"], 2 * l1 + l2, rel_tol=1e-5)
    assert e["h1_accuracy"] == float(np.mean(p1.argmax(1) == ys[0].argmax(1))) and e["n_samples"] == 8
    h = m.fit(x[:4], [y[:4] for y in ys], epochs=2, batch_size=2, validation_data=(x[4:], [y[4:] for y in ys]))
    for split in ("train", "val"):
        for e_ in range(2):
            want = 2 * h[f"{split}_h1_loss"][e_] + h[f"{split}_h2_loss"][e_]
            assert math.isclose(h[f"{split}_loss"][e_], want, rel_tol=1e-5)
        assert all(0 <= a <= 1 for a in h[f"{split}_h1_accuracy"])
    # the validation losses are those of the weights at the end of the epoch
    e = g.ggml_evaluate(m, x[4:], [y[4:] for y in ys], batch_size=2)
    assert math.isclose(h["val_loss"][-1], e["loss"], rel_tol=1e-4)


def test_multi_output_compile_settings_survive_save_load(tmp_path):
    m = g.ggml_compile(_two_head_model(), loss={"h1": "categorical_crossentropy", "h2": "mse"},
                       loss_weights={"h1": 0.25, "h2": 2.0})
    g.ggml_save_model(m, tmp_path / "m.npz")
    m2 = g.ggml_load_model(tmp_path / "m.npz")
    assert m2.output_losses == ["categorical_crossentropy", "mse"] and m2.loss_weights == [0.25, 2.0]


def test_multi_output_targets_and_losses():
    m = g.ggml_compile(_two_head_model(), loss={"h2": "mse"}, optimizer="sgd", lr=0.1)   # h1: no loss
    x = _data((3,), 4)
    y2 = RNG.uniform(-1, 1, (4, 2))
    before = m.get_weights()
    h = m.fit(x, {"h2": y2}, epochs=1, batch_size=4)
    after = m.get_weights()
    assert np.array_equal(after["h1"]["weight"], before["h1"]["weight"])       # untrained head
    assert not np.array_equal(after["h2"]["weight"], before["h2"]["weight"])
    assert h.fit_path == "opt_fit" and "train_h2_loss" not in h   # one output: the plain path
    with pytest.raises(GGMLError, match="no loss"):
        m.fit(x, [np.eye(3)[[0, 1, 2, 0]], y2], epochs=1, batch_size=4)
    with pytest.raises(GGMLError, match="no output named"):
        g.ggml_compile(_two_head_model(), loss={"head": "mse"})
    with pytest.raises(GGMLError, match="2 outputs"):
        g.ggml_compile(_two_head_model(), loss=["mse"])
    with pytest.raises(GGMLError, match="loss_weights"):
        g.ggml_compile(_two_head_model(), loss="mse", loss_weights=[1.0, -1.0])
    m = g.ggml_compile(_two_head_model(), loss="mse")
    with pytest.raises(GGMLError, match="class_weight"):
        m.fit(x, [RNG.uniform(size=(4, 3)), y2], batch_size=4, class_weight={0: 2.0})
    with pytest.raises(GGMLError, match="columns"):
        m.fit(x, [y2, y2], batch_size=4)
    with pytest.warns(UserWarning, match="only the last output"):
        m.fit(x, y2, epochs=1, batch_size=4)   # ggmlR's rule, no longer silent
    s = g.ggml_compile(_seq((g.ggml_layer_dense, dict(units=2)), input_shape=(3,)), loss="mse")
    assert s.evaluate(x, [y2]) == s.evaluate(x, y2)   # a one-output model takes a list of one target too


def test_embedding_sequential_and_bad_ids():
    m = g.ggml_model_sequential()
    m = g.ggml_layer_embedding(m, vocab_size=7, dim=3, input_shape=4)
    m = g.ggml_layer_flatten(m)
    m = g.ggml_layer_dense(m, 2)
    g.ggml_compile(m, loss="mse")
    ids = RNG.integers(0, 7, (5, 4))
    np.testing.assert_allclose(g.ggml_predict(m, ids, 2), pk.reference_predict(m, ids)[0], rtol=1e-5, atol=1e-6)
    with pytest.raises(GGMLError, match="token ids"):
        g.ggml_predict(m, ids + 7)


def test_embedding_gradients_match_finite_differences():
    m = g.ggml_model_sequential()
    m = g.ggml_layer_embedding(m, vocab_size=6, dim=3, input_shape=4)
    m = g.ggml_layer_lstm(m, 2)
    m = g.ggml_compile(g.ggml_layer_dense(m, 2), loss="mse", optimizer="sgd", lr=0.1)
    _randomize(m)
    ids = RNG.integers(0, 6, (5, 4))
    ids[0] = [1, 1, 1, 2]   # repeated ids: their gradients add up
    y = _data((2,), 5)
    before = m.get_weights()
    m._record_order = True
    h = m.fit(ids, y, epochs=2, batch_size=5)

    def forward(W, xb):
        return pk.reference_predict(m, xb, W, training=True)[-1]
    rows, W = ref.train_reference(forward, before, list(before), ids, y, h.batch_order, 5, 5, 2, "mse", "sgd", lr=0.1)
    np.testing.assert_allclose(h["train_loss"], [r[0] for r in rows], rtol=1e-4, atol=1e-6)
    for ln, ps in W.items():
        for k, v in ps.items():
            np.testing.assert_allclose(m.get_weights()[ln][k], v, rtol=1e-3, atol=2e-5, err_msg=f"{ln}.{k}")


def test_save_load_continues_the_same_loss_curve(tmp_path):
    x = _data((4,), 32)
    y = np.eye(3)[RNG.integers(0, 3, 32)]

    def fresh():
        m = _seq((g.ggml_layer_dense, dict(units=8, activation="relu")),
                 (g.ggml_layer_dense, dict(units=3, activation="softmax")), input_shape=(4,))
        return g.ggml_compile(m, optimizer="adam", lr=0.01)
    a = fresh()
    g.ggml_fit(a, x, y, epochs=2, batch_size=8, verbose=0)
    path = tmp_path / "model.npz"
    g.ggml_save_model(a, path)
    b = g.ggml_load_model(path)
    np.testing.assert_array_equal(g.ggml_predict(a, x), g.ggml_predict(b, x))
    # every fit starts a fresh optimizer and shuffle RNG (ggmlR's rule): both go on along the same curve
    ha = a.fit(x, y, epochs=3, batch_size=8)
    hb = b.fit(x, y, epochs=3, batch_size=8)
    np.testing.assert_array_equal(ha["train_loss"], hb["train_loss"])
    # weights alone into a rebuilt model
    g.ggml_save_weights(a, tmp_path / "w.npz")
    c = fresh()
    g.ggml_load_weights(c, tmp_path / "w.npz")
    np.testing.assert_array_equal(g.ggml_predict(a, x), g.ggml_predict(c, x))
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]


def test_loaded_weights_do_not_override_training(tmp_path):
    """ggmlR keeps predicting with loaded weights after a fit (its defect 1); ggmlpy trains them."""
    m = g.ggml_compile(_seq((g.ggml_layer_dense, dict(units=2)), input_shape=(3,)), loss="mse", optimizer="sgd",
                       lr=0.1)
    g.ggml_save_weights(m, tmp_path / "w.npz")
    g.ggml_load_weights(m, tmp_path / "w.npz")
    x, y = _data((3,), 8), _data((2,), 8)
    before = g.ggml_predict(m, x)
    g.ggml_fit(m, x, y, epochs=5, batch_size=8, verbose=0)
    assert np.abs(g.ggml_predict(m, x) - before).max() > 1e-3


def test_load_model_functional_round_trip(tmp_path):
    m = g.ggml_compile(_functional_model())
    _randomize(m)
    g.ggml_save_model(m, tmp_path / "f.npz")
    m2 = g.ggml_load_model(tmp_path / "f.npz")
    xs = [_data((3,), 4), _data((2,), 4)]
    np.testing.assert_array_equal(g.ggml_predict(m, xs, 4), g.ggml_predict(m2, xs, 4))
    with pytest.raises(GGMLError):
        g.ggml_load_model(tmp_path / "missing.npz")


def test_callbacks_early_stopping_and_schedules():
    x, y = _data((3,), 16), _data((2,), 16)
    m = g.ggml_compile(_seq((g.ggml_layer_dense, dict(units=2)), input_shape=(3,)), loss="mse", optimizer="sgd",
                       lr=1e-9)  # nothing improves: early stopping must fire
    es = g.ggml_callback_early_stopping(monitor="train_loss", patience=2, min_delta=1e-3)
    h = m.fit(x, y, epochs=20, batch_size=16, callbacks=[es])
    assert len(h["train_loss"]) == 3 and es.stopped_epoch == 3
    seen = []

    class Probe:
        def on_epoch_begin(self, epoch, logs, state):
            seen.append(state.lr)
    m.compile(loss="mse", optimizer="sgd", lr=0.1)
    m.fit(x, y, epochs=5, batch_size=16, callbacks=[g.ggml_schedule_step_decay(step_size=2, gamma=0.5), Probe()])
    np.testing.assert_allclose(seen, [0.1, 0.1, 0.05, 0.05, 0.025])
    seen.clear()
    m.fit(x, y, epochs=3, batch_size=16, callbacks=[g.ggml_schedule_cosine_decay(eta_min=0.0), Probe()])
    np.testing.assert_allclose(seen, [0.1, 0.075, 0.025], rtol=1e-6)
    seen.clear()
    m.compile(loss="mse", optimizer="sgd", lr=1e-9)
    m.fit(x, y, epochs=4, batch_size=16,
          callbacks=[g.ggml_schedule_reduce_on_plateau(monitor="train_loss", patience=1, factor=0.5, min_lr=1e-12),
                     Probe()])
    assert seen[-1] < 1e-9


def test_callback_exception_propagates():
    m = g.ggml_compile(_seq((g.ggml_layer_dense, dict(units=2)), input_shape=(3,)), loss="mse")

    class Boom:
        def on_epoch_end(self, epoch, logs, state):
            raise RuntimeError("boom")
    with pytest.raises(RuntimeError, match="boom"):
        m.fit(_data((3,), 4), _data((2,), 4), epochs=2, batch_size=4, callbacks=[Boom()])


def test_history_plot_png(tmp_path):
    pytest.importorskip("matplotlib")
    m = g.ggml_compile(_seq((g.ggml_layer_dense, dict(units=2, activation="softmax")), input_shape=(3,)))
    g.ggml_fit(m, _data((3,), 8), np.eye(2)[RNG.integers(0, 2, 8)], epochs=2, batch_size=4, validation_split=0.5,
               verbose=0)
    h = g.ggml_training_history(m)
    assert h["val_loss"][0] is not None and "Training History (2 epochs)" in repr(h)
    p = h.plot(tmp_path / "h.png")
    assert pathlib.Path(p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_true_validation_data_stays_out_of_training():
    m = g.ggml_compile(_seq((g.ggml_layer_dense, dict(units=2)), input_shape=(3,)), loss="mse", optimizer="sgd")
    h = m.fit(_data((3,), 8), _data((2,), 8), epochs=3, batch_size=4,
              validation_data=(_data((3,), 4), _data((2,), 4)), record_batch_order=True)
    assert h.n_train == 8 and h.n_used == 12
    for order in h.batch_order:
        assert sorted(order[:8]) == list(range(8)) and order[8:] == [8, 9, 10, 11]


@pytest.mark.parametrize("bad", [
    lambda: g.ggml_layer_dense(g.ggml_model_sequential(), 0, input_shape=3),
    lambda: g.ggml_compile(_seq((g.ggml_layer_dense, dict(units=2)), input_shape=(3,)), loss="hinge"),
    lambda: g.ggml_predict(g.ggml_compile(_seq((g.ggml_layer_dense, dict(units=2)), input_shape=(3,))),
                           np.zeros((4, 5))),
    lambda: g.ggml_fit(g.ggml_compile(_seq((g.ggml_layer_dense, dict(units=2)), input_shape=(3,))),
                       np.zeros((4, 3)), np.zeros((4, 3)), verbose=0, batch_size=4),
    lambda: g.ggml_fit(g.ggml_compile(_seq((g.ggml_layer_dense, dict(units=2)), input_shape=(3,))),
                       np.zeros((4, 3)), np.zeros((4, 2)), batch_size=8, verbose=0),
    lambda: g.ggml_compile(_seq((g.ggml_layer_dense, dict(units=2)), (g.ggml_layer_conv_2d,
                                                                      dict(filters=1, kernel_size=2)),
                                input_shape=(3,))),
    lambda: g.ggml_fit(g.ggml_compile(_seq((g.ggml_layer_dense, dict(units=2, activation="gelu")),
                                           input_shape=(3,)), loss="mse"),
                       np.zeros((4, 3)), np.zeros((4, 2)), batch_size=4, verbose=0),
    lambda: g.ggml_predict(g.ggml_model_sequential(), np.zeros((2, 2))),
])
def test_bad_input_raises(bad):
    with pytest.raises(GGMLError):
        bad()


def test_ggml_opt_low_level_loop():
    """ggml_opt_* by hand: y = 2x - 1 learned by one weight and one bias."""
    ctx_w = g.ggml_init(1 << 20, no_alloc=True)
    w = g.ggml_new_tensor_2d(ctx_w, g.GGML_TYPE_F32, 1, 1)
    bias = g.ggml_new_tensor_1d(ctx_w, g.GGML_TYPE_F32, 1)
    inp = g.ggml_new_tensor_2d(ctx_w, g.GGML_TYPE_F32, 1, 8)
    from ggmlpy.bindings import lib
    lib.ggml_set_param(w.ptr)
    lib.ggml_set_param(bias.ptr)
    cpu = g.ggml_backend_cpu_init()
    buf = g.ggml_backend_alloc_ctx_tensors(ctx_w, cpu)  # noqa: F841  (keeps the weights alive)
    g.ggml_backend_tensor_set(w, np.array([[0.1]], np.float32))
    g.ggml_backend_tensor_set(bias, np.array([0.0], np.float32))
    ctx = g.ggml_init(64 << 20, no_alloc=True)
    out = g.ggml_add(ctx, g.ggml_mul_mat(ctx, w, inp), bias)
    sched = g.ggml_backend_sched_new([cpu])
    opt = g.ggml_opt_init(sched, ctx, inp, out, g.ggml_opt_loss_type_mse(), g.ggml_opt_optimizer_type_sgd(), lr=0.1)
    assert g.ggml_opt_static_graphs(opt) and g.ggml_opt_optimizer_name(g.ggml_opt_context_optimizer_type(opt)) == "sgd"
    ds = g.ggml_opt_dataset_init(g.GGML_TYPE_F32, g.GGML_TYPE_F32, 1, 1, 32)
    xs = np.linspace(-1, 1, 32, dtype=np.float32)
    g.ggml_opt_dataset_data(ds)[:, 0] = xs
    g.ggml_opt_dataset_labels(ds)[:, 0] = 2 * xs - 1
    assert g.ggml_opt_dataset_ndata(ds) == 32
    bx, by = g.ggml_opt_dataset_get_batch(ds, 8, 1)
    np.testing.assert_array_equal(bx[:, 0], xs[8:16])
    res = g.ggml_opt_result_init()
    calls = []
    losses = []
    for _ in range(60):
        g.ggml_opt_result_reset(res)
        g.ggml_opt_epoch(opt, ds, res, None, -1, lambda train, i, n: calls.append((train, i, n)))
        losses.append(g.ggml_opt_result_loss(res)[0])
    assert calls[:4] == [(True, 1, 4), (True, 2, 4), (True, 3, 4), (True, 4, 4)]
    assert losses[-1] < 1e-3 < losses[0]
    assert g.ggml_opt_result_ndata(res) == 32 and math.isnan(g.ggml_opt_result_accuracy(res)[0])
    np.testing.assert_allclose(g.ggml_backend_tensor_get(w).ravel(), [2.0], atol=0.05)
    g.ggml_opt_set_lr(opt, 0.01)
    assert g.ggml_opt_get_lr(opt) == pytest.approx(0.01)

    def boom(train, i, n):
        raise ValueError("from a callback")
    with pytest.raises(ValueError, match="from a callback"):
        g.ggml_opt_epoch(opt, ds, res, None, -1, boom)
    with pytest.raises(GGMLError):
        g.ggml_opt_epoch(opt, ds, res, None, 12)          # split not a multiple of the batch
    with pytest.raises(GGMLError):
        g.ggml_opt_dataset_get_batch(ds, 8, 4)
    with pytest.raises(GGMLError):
        g.ggml_opt_dataset_init(g.GGML_TYPE_F32, g.GGML_TYPE_F32, 0, 1, 32)
    with pytest.raises(GGMLError):
        g.ggml_opt_loss_type_weighted_mse()
    g.ggml_opt_free(opt)
    g.ggml_opt_dataset_free(ds)


def test_summary_and_default_mlp():
    m = g.ggml_default_mlp(4, 3, hidden_layers=(8,), dropout=0.1)
    text = g.ggml_model_summary(m, print_fn=None)
    assert "Total params: 67" in text and "dropout" in text
    assert m.count_params() == 4 * 8 + 8 + 8 * 3 + 3
    assert g.ggml_get_layer(m, index=3).units == 3
    g.ggml_pop_layer(m)
    assert len(m.layers) == 2


def test_softmax_ce_exact_trains_on_the_true_cross_entropy():
    """softmax_ce="exact": the epoch loss is CE(softmax(z)) = ggml_evaluate's loss for the same
    weights (ggmlR's default trains on CE(softmax(softmax(z))) instead)."""
    x = _data((4,), 12)
    y = np.eye(3)[RNG.integers(0, 3, 12)]
    for mode, same in (("exact", True), ("ggmlr", False)):
        m = _seq((g.ggml_layer_dense, dict(units=3, activation="softmax")), input_shape=(4,))
        m = g.ggml_compile(m, loss="categorical_crossentropy", optimizer="sgd", softmax_ce=mode)
        before = g.ggml_evaluate(m, x, y, batch_size=12)["loss"]
        h = m.fit(x, y, epochs=1, batch_size=12)
        assert (abs(h["train_loss"][0] - before) < 1e-5) == same


def test_keras_demo_digits_cnn_reaches_97_percent():
    pytest.importorskip("sklearn")
    from ggmlpy.cli.keras_demo import digits_cnn
    threads = g.get_num_threads()
    g.set_num_threads(1)   # tiny batches: one thread is fastest, and this machine is shared
    try:
        r = digits_cnn(epochs=20)
    finally:
        g.set_num_threads(threads)
    assert r["test_accuracy"] >= 0.97


def test_true_batch_norm_running_averages():
    """mode="batch": after each training batch, running = 0.9 running + 0.1 batch statistic
    (biased variance); validation batches leave them alone; inference uses them."""
    m = _seq((g.ggml_layer_dense, dict(units=3)), (g.ggml_layer_batch_norm, dict(mode="batch", momentum=0.1)),
             input_shape=(2,))
    m = g.ggml_compile(m, loss="mse", optimizer="sgd", lr=1e-12)   # the dense layer stays put
    _randomize(m)
    w, w0 = m.get_weights()["dense_1"], m.get_weights()["batch_norm_1"]
    x, y = _data((2,), 12), _data((3,), 12)
    m._record_order = True
    h = m.fit(x, y, epochs=1, batch_size=4, validation_split=0.3)
    assert h.n_train == 8
    z = x @ w["weight"].T.astype(np.float64) + w["bias"]
    rm, rv = w0["running_mean"].astype(np.float64), w0["running_var"].astype(np.float64)
    for i in range(2):
        zb = z[h.batch_order[0][4 * i:4 * i + 4]]
        rm, rv = 0.9 * rm + 0.1 * zb.mean(0), 0.9 * rv + 0.1 * zb.var(0)
    bn = m.layers[1]
    np.testing.assert_allclose(bn.weights["running_mean"], rm, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(bn.weights["running_var"], rv, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(g.ggml_predict(m, x), pk.reference_predict(m, x)[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["dense_relu", "conv_2d_valid", "lstm", "true_batch_norm"])
def test_predict_does_not_depend_on_batch_size(name):
    """Zero-padded and remainder batches, and a batch of one sample (ggmlR's flatten aborts on it)."""
    layers, shape = LAYER_CASES[name]
    m = g.ggml_compile(_seq(*layers, input_shape=shape), loss="mse")
    _randomize(m)
    x = _data(shape, 7)
    full = g.ggml_predict(m, x, batch_size=7)
    for bs in (1, 3, 32):
        np.testing.assert_allclose(g.ggml_predict(m, x, batch_size=bs), full, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(g.ggml_predict(m, x[:1], batch_size=1), full[:1], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("weights", ["sample", "class"])
def test_weighted_cross_entropy_gradient_matches_finite_differences(weights):
    """ggmlR weights CE by scaling the labels, which ggml's CE gradient gets wrong; the default
    here weights each sample's loss."""
    m = _seq((g.ggml_layer_dense, dict(units=4, activation="tanh")),
             (g.ggml_layer_dense, dict(units=3, activation="softmax")), input_shape=(3,))
    m = g.ggml_compile(m, optimizer="sgd", lr=0.2)
    _randomize(m)
    x = _data((3,), 6)
    y = np.eye(3)[RNG.integers(0, 3, 6)]
    sw = RNG.uniform(0.2, 3.0, 6)
    kw = {"sample_weight": sw} if weights == "sample" else {"class_weight": {0: 0.5, 1: 2.0, 2: 3.0}}
    w = sw if weights == "sample" else np.array([0.5, 2.0, 3.0])[y.argmax(1)]
    before = m.get_weights()
    m._record_order = True
    h = m.fit(x, y, epochs=3, batch_size=6, **kw)

    def forward(W, xb):
        return pk.reference_predict(m, xb, W, training=True)[-1]
    rows, W = ref.train_reference(forward, before, list(before), x, y * w[:, None], h.batch_order, 6, 6, 3,
                                  "cross_entropy_of_probabilities", "sgd", lr=0.2)
    np.testing.assert_allclose(h["train_loss"], [r[0] for r in rows], rtol=1e-4, atol=1e-6)
    for ln, ps in W.items():
        for k, v in ps.items():
            np.testing.assert_allclose(m.get_weights()[ln][k], v, rtol=1e-3, atol=2e-5, err_msg=f"{ln}.{k}")
    assert 0 <= h["train_accuracy"][-1] <= 1


def _linear_problem(batch=8):
    """y = 2x - 1 with one weight and one bias: (sched, ctx, inputs, outputs, dataset, w)."""
    from ggmlpy.bindings import lib
    ctx_w = g.ggml_init(1 << 20, no_alloc=True)
    w = g.ggml_new_tensor_2d(ctx_w, g.GGML_TYPE_F32, 1, 1)
    bias = g.ggml_new_tensor_1d(ctx_w, g.GGML_TYPE_F32, 1)
    inp = g.ggml_new_tensor_2d(ctx_w, g.GGML_TYPE_F32, 1, batch)
    lib.ggml_set_param(w.ptr)
    lib.ggml_set_param(bias.ptr)
    cpu = g.ggml_backend_cpu_init()
    buf = g.ggml_backend_alloc_ctx_tensors(ctx_w, cpu)
    g.ggml_backend_tensor_set(w, np.array([[0.1]], np.float32))
    g.ggml_backend_tensor_set(bias, np.array([0.0], np.float32))
    ctx = g.ggml_init(64 << 20, no_alloc=True)
    out = g.ggml_add(ctx, g.ggml_mul_mat(ctx, w, inp), bias)
    ds = g.ggml_opt_dataset_init(g.GGML_TYPE_F32, g.GGML_TYPE_F32, 1, 1, 32)
    xs = np.linspace(-1, 1, 32, dtype=np.float32)
    g.ggml_opt_dataset_data(ds)[:, 0] = xs
    g.ggml_opt_dataset_labels(ds)[:, 0] = 2 * xs - 1
    return g.ggml_backend_sched_new([cpu]), ctx, inp, out, ds, w, (ctx_w, buf, cpu)


def test_ggml_fit_opt_history_and_callbacks():
    sched, ctx, inp, out, ds, w, _keep = _linear_problem()
    es = g.ggml_callback_early_stopping(monitor="train_loss", patience=1, min_delta=10.0)
    hist = g.ggml_fit_opt(sched, ctx, inp, out, ds, g.ggml_opt_loss_type_mse(), g.ggml_opt_optimizer_type_sgd(),
                          nepoch=50, nbatch_logical=8, val_split=0.25, callbacks=[es], silent=True, lr=0.1)
    assert len(hist["train_loss"]) == 2 and es.stopped_epoch == 2   # min_delta 10: never "improves" twice
    assert hist["val_loss"][0] is not None and np.isnan(hist["train_accuracy"][0])
    with pytest.raises(GGMLError):
        g.ggml_fit_opt(sched, ctx, inp, out, ds, nbatch_logical=12)


def test_ggml_opt_alloc_eval_by_hand():
    sched, ctx, inp, out, ds, w, _keep = _linear_problem()
    opt = g.ggml_opt_init_for_fit(sched, g.ggml_opt_loss_type_mse(), g.ggml_opt_optimizer_type_sgd(),
                                  ctx_compute=ctx, inputs=inp, outputs=out, lr=0.5)
    res = g.ggml_opt_result_init()
    with pytest.raises(GGMLError, match="ggml_opt_alloc first"):
        g.ggml_opt_eval(opt, res)
    lab = g.ggml_opt_labels(opt)
    for step in range(200):
        xb, yb = g.ggml_opt_dataset_get_batch(ds, 8, step % 4)
        g.ggml_opt_alloc(opt, True)
        g.ggml_backend_tensor_set(inp, xb)           # [batch, ne] numpy = ggml [ne, batch]
        g.ggml_backend_tensor_set(lab, yb)
        g.ggml_opt_eval(opt, res)
    np.testing.assert_allclose(g.ggml_backend_tensor_get(w).ravel(), [2.0], atol=1e-3)
    assert g.ggml_opt_grad_acc(opt, out) is None   # accumulators exist only with opt_period > 1 (and for the loss)
    assert g.ggml_opt_default_params(sched, g.ggml_opt_loss_type_mse())["adamw"]["alpha"] == 1e-3
    with pytest.raises(GGMLError):
        g.ggml_opt_prepare_alloc(opt)
    with pytest.raises(GGMLError):
        g.ggml_opt_dataset_weights(ds)
    g.ggml_opt_free(opt)


# -- graph size: models beyond ggml_opt's static graphs ----------------------------------------------
def _spy_caller_graphs(monkeypatch):
    calls = []
    orig = g.keras.engine._epoch_caller_graphs
    monkeypatch.setattr(g.keras.engine, "_epoch_caller_graphs", lambda *a: (calls.append(1), orig(*a))[1])
    return calls


def test_deep_dense_trains_beyond_the_static_graphs(monkeypatch):
    """150 dense layers: 750 forward nodes (the old limit was 500) and a step graph past
    ggml_opt's 2048-node static graphs. The middle layers are frozen rotations followed by tanh
    near 0 (nearly linear), so that finite differences stay cheap and the gradient reaches the
    first layer (at about 0.7 of its size)."""
    calls = _spy_caller_graphs(monkeypatch)
    m = g.ggml_model_sequential()
    m = g.ggml_layer_dense(m, 2, activation="tanh", input_shape=3)
    for _ in range(148):
        m = g.ggml_layer_dense(m, 2, activation="tanh")
    m = g.ggml_layer_dense(m, 2)
    m = g.ggml_compile(m, loss="mse", optimizer="sgd", lr=0.5)
    for l in m._all_layers():
        a = RNG.uniform(0, 2 * np.pi)
        rot = np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
        l.weights["weight"] = (rot if l.name != "dense_1" else RNG.uniform(-0.1, 0.1, (2, 3))).astype(np.float32)
        l.weights["bias"] = np.zeros(2, np.float32)
    g.ggml_freeze_weights(m, from_=2, to=149)
    x, y = _data((3,), 4), RNG.uniform(-1, 1, (4, 2))
    before = m.get_weights()
    m._record_order = True
    h = m.fit(x, y, epochs=2, batch_size=4)
    assert calls, "expected the caller-built graphs"

    def forward(W, xb):
        return pk.reference_predict(m, xb, W, training=True)[-1]
    rows, W = ref.train_reference(forward, before, ["dense_1", "dense_150"], x, y, h.batch_order, 4, 4, 2, "mse",
                                  "sgd", lr=0.5)
    np.testing.assert_allclose(h["train_loss"], [r[0] for r in rows], rtol=1e-4, atol=1e-6)
    after = m.get_weights()
    for ln in ("dense_1", "dense_150"):
        for k, v in W[ln].items():
            np.testing.assert_allclose(after[ln][k], v, rtol=1e-3, atol=2e-5, err_msg=f"{ln}.{k}")
    assert not np.allclose(after["dense_1"]["weight"], before["dense_1"]["weight"])
    assert np.array_equal(after["dense_70"]["weight"], before["dense_70"]["weight"])


def test_deep_cnn_trains_beyond_the_static_graphs(monkeypatch):
    calls = _spy_caller_graphs(monkeypatch)
    m = g.ggml_model_sequential()
    m = g.ggml_layer_conv_2d(m, 4, 3, activation="relu", padding="same", input_shape=(8, 8, 1))
    for _ in range(69):   # 70 convolutions: ~2200 nodes in the step graph
        m = g.ggml_layer_conv_2d(m, 4, 3, activation="relu", padding="same")
    m = g.ggml_layer_global_average_pooling_2d(m)
    m = g.ggml_layer_dense(m, 2, activation="softmax")
    g.manual_seed(0)   # the initial weights (drawn at compile)
    m = g.ggml_compile(m, lr=3e-3)
    x = np.random.default_rng(0).uniform(0, 1, (32, 8, 8, 1))
    y = np.eye(2)[(x.mean(axis=(1, 2, 3)) > 0.5).astype(int)]
    h = m.fit(x, y, epochs=4, batch_size=8)
    assert calls and all(np.isfinite(h["train_loss"])) and h["train_loss"][-1] < h["train_loss"][0]
    # the trained weights came back: predictions match the numpy reference on them
    np.testing.assert_allclose(g.ggml_predict(m, x[:5]), pk.reference_predict(m, x[:5])[0], rtol=1e-4, atol=1e-5)


def test_model_too_big_is_an_error_not_an_abort(monkeypatch):
    monkeypatch.setattr(g.keras.graphsize, "MAX_GRAPH_NODES", 3000)
    m = g.ggml_model_sequential()
    m = g.ggml_layer_dense(m, 2, activation="tanh", input_shape=3)
    for _ in range(200):
        m = g.ggml_layer_dense(m, 2, activation="tanh")
    m = g.ggml_compile(m, loss="mse")
    x, y = _data((3,), 4), RNG.uniform(-1, 1, (4, 2))
    with pytest.raises(GGMLError, match="too big"):
        m.fit(x, y, batch_size=4)
    monkeypatch.undo()
    # a graph that outgrows the builder's context (65536 tensors): a recurrent layer over 20000 steps
    m = g.ggml_compile(_seq((g.ggml_layer_gru, dict(units=2)), input_shape=(20000, 1)), loss="mse")
    with pytest.raises(GGMLError, match="too big"):
        g.ggml_predict(m, np.zeros((1, 20000, 1)))
    with pytest.raises(GGMLError, match="too big"):
        m.fit(np.zeros((2, 20000, 1)), np.zeros((2, 2)), batch_size=2)


def test_ggml_set_seed_makes_initialisation_and_dropout_repeat():
    """ggmlR's ggml_set_seed fixes a Keras-like model's weight initialisation and dropout masks."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 5)).astype(np.float32)
    y = np.eye(3)[rng.integers(0, 3, 64)]

    def run():
        g.ggml_set_seed(42)
        m = g.ggml_compile(g.ggml_default_mlp(5, 3, hidden_layers=(8,), dropout=0.5))
        init = m.get_weights()
        m.fit(x, y, epochs=2, batch_size=16)
        return init, m.get_weights()

    (a0, a1), (b0, b1) = run(), run()
    for name in a0:
        for k in a0[name]:
            np.testing.assert_array_equal(a0[name][k], b0[name][k])
            np.testing.assert_array_equal(a1[name][k], b1[name][k])


def test_fit_and_predict_run_on_ggmlpy_kernels(monkeypatch):
    """On the CPU every product of the training graphs (the forward pass and those ggml's backward
    pass makes) and of the prediction graph runs on ggmlpy.kernels' gemm, the ag_* path's product
    kernel, and a convolution's input gradient on conv.c's; the numbers are those of ggml's own
    kernels up to float rounding."""
    from ggmlpy import kernels
    from ggmlpy.bindings import ffi, lib
    if kernels.get() is None or kernels.get().gemm is None or kernels.get().conv2d is None:
        pytest.skip("no gemm or conv kernels (no C compiler or no OpenMP/sequential OpenBLAS)")
    seen = []   # per kernels.adopt call: (nodes moved, products and im2col gradients left to ggml)
    adopt = kernels.adopt

    def spy(k, ctx):
        n, left, t = adopt(k, ctx), 0, lib.ggml_get_first_tensor(ctx)
        while t != ffi.NULL:
            left += t.op in (lib.GGML_OP_MUL_MAT, lib.GGML_OP_OUT_PROD, lib.GGML_OP_IM2COL_BACK)
            t = lib.ggml_get_next_tensor(ctx, t)
        seen.append((n, left))
        return n
    monkeypatch.setattr(kernels, "adopt", spy)
    x = RNG.uniform(0, 1, (16,) + IMG)
    y = np.eye(2)[RNG.integers(0, 2, 16)]

    def run():
        m = _seq((g.ggml_layer_conv_2d, dict(filters=3, kernel_size=3, activation="relu", padding="same")),
                 (g.ggml_layer_max_pooling_2d, dict(pool_size=2)),
                 (g.ggml_layer_conv_2d, dict(filters=4, kernel_size=2, activation="relu")),
                 (g.ggml_layer_flatten, {}), (g.ggml_layer_dense, dict(units=5, activation="relu")),
                 (g.ggml_layer_dense, dict(units=2, activation="softmax")), input_shape=IMG)
        m._rng = np.random.default_rng(0)
        m = g.ggml_compile(m, lr=0.01)
        h = m.fit(x, y, epochs=3, batch_size=8)
        return h["train_loss"], m.get_weights(), g.ggml_predict(m, x)

    loss, weights, pred = run()
    # training: 6 forward products (two per convolution: its kernel, its bias row), 9 of the
    # backward pass and the second convolution's input gradient (the first convolution's input
    # needs none); the prediction graph's 6 products
    assert seen == [(16, 0), (6, 0)]
    prev = kernels.set_enabled(False)
    try:
        loss0, weights0, pred0 = run()
    finally:
        kernels.set_enabled(prev)
    assert len(seen) == 2   # without the kernels nothing is adopted
    np.testing.assert_allclose(loss, loss0, rtol=1e-5)
    for ln, ps in weights0.items():
        for k, v in ps.items():
            np.testing.assert_allclose(weights[ln][k], v, rtol=1e-4, atol=1e-6, err_msg=f"{ln}.{k}")
    np.testing.assert_allclose(pred, pred0, rtol=1e-4, atol=1e-6)


# -- ggmlR's fields on layer objects: node_type, config (a dict), layer_id ------------------------------
def test_every_sequential_layer_has_ggmlr_fields():
    m = g.ggml_model_sequential()
    m = g.ggml_layer_conv_2d(m, 4, 3, input_shape=(8, 8, 2))
    m = g.ggml_layer_max_pooling_2d(m, 2)
    m = g.ggml_layer_batch_norm(m)
    m = g.ggml_layer_flatten(m)
    m = g.ggml_layer_dropout(m, rate=0.2)
    m = g.ggml_layer_dense(m, 5, activation="relu")
    ids = set()
    for layer in m.layers:
        assert layer.node_type == layer.type == layer.kind
        assert isinstance(layer.config, dict)
        assert layer.config() == dict(layer.config) and type(layer.config()) is dict  # the method form
        assert layer.layer_id.startswith("layer_")
        ids.add(layer.layer_id)
    assert len(ids) == len(m.layers)
    assert m.layers[-1].config["units"] == 5 and m.layers[-1].config["activation"] == "relu"
    assert m.layers[4].config["rate"] == 0.2


def test_layer_config_is_a_snapshot():
    d = g.ggml_dense(7)
    cfg = d.config
    cfg["units"] = 99
    assert d.config["units"] == 7 and d.units == 7


def test_layer_id_is_the_sharing_key_of_a_layer_applied_twice():
    shared = g.ggml_lstm(units=3)
    x1, x2 = g.ggml_input(shape=(4, 2)), g.ggml_input(shape=(4, 2))
    o1, o2 = g.ggml_apply(x1, shared), g.ggml_apply(x2, shared)
    other = g.ggml_apply(x1, g.ggml_lstm(units=3))
    assert o1.layer_id == o2.layer_id == shared.layer_id != other.layer_id
    assert x1.layer_id is None  # an input applies no layer
    assert o1.config == {**shared.config, "name": shared.name}
    # ggml_model merges two layers of one name (ggmlR's name sharing): one key, one weight set
    x1, x2 = g.ggml_input(shape=4), g.ggml_input(shape=4)
    a = g.ggml_layer_dense(x1, 2, name="enc")
    b = g.ggml_layer_dense(x2, 2, name="enc")
    assert a.layer_id != b.layer_id
    m = g.ggml_model(inputs=[x1, x2], outputs=[a, b])
    assert a.layer_id == b.layer_id
    assert m.count_params() == 4 * 2 + 2


def test_a_copied_or_unpickled_layer_gets_its_own_layer_id():
    import copy
    import pickle
    d = g.ggml_dense(3, activation="tanh")
    for twin in (copy.deepcopy(d), pickle.loads(pickle.dumps(d))):
        assert twin.layer_id != d.layer_id
        assert twin.config == d.config


def test_a_layer_subclass_may_define_config_as_a_method():
    class Scale(g.Layer):
        kind = "scale_test"

        def __init__(self, factor, **kw):
            super().__init__(**kw)
            self.factor = factor

        def config(self):
            return {"factor": self.factor}

    s = Scale(2.5)
    assert s.config["factor"] == 2.5 and s.config() == {"factor": 2.5}
    assert s.node_type == "scale_test"


def test_saved_layer_config_is_a_plain_dict(tmp_path):
    m = g.ggml_layer_dense(g.ggml_model_sequential(), 3, input_shape=4)
    m.compile(loss="mse")
    path = tmp_path / "m.rds"
    g.ggml_save_model(m, str(path))
    m2 = g.ggml_load_model(str(path))
    assert m2.layers[0].config == {"units": 3, "activation": None}
    assert m2.layers[0].layer_id != m.layers[0].layer_id


# -- divergences from ggmlR pinned (docs/divergences.md, Keras-like models) ---------------------------------
def test_ggml_compile_checks_shapes_before_any_fit():
    """ggmlR finds these in ggml_fit; ggmlpy's ggml_compile already infers every shape."""
    x = g.ggml_input(shape=4)
    z = g.ggml_layer_add([g.ggml_layer_dense(x, 8), g.ggml_layer_dense(x, 4)], name="mismatch")
    with pytest.raises(GGMLError, match=r"add 'mismatch': shape mismatch.*\[\(8,\), \(4,\)\]"):
        g.ggml_compile(g.ggml_model(inputs=x, outputs=g.ggml_layer_dense(z, 2)), loss="mse")
    c = g.ggml_layer_concatenate([g.ggml_layer_dense(x, 4), g.ggml_layer_dense(x, 4)], axis=5)
    with pytest.raises(GGMLError, match="out of range"):
        g.ggml_compile(g.ggml_model(inputs=x, outputs=g.ggml_layer_dense(c, 2)), loss="mse")


def test_ggml_model_refuses_outputs_that_depend_on_inputs_not_listed():
    a, b = g.ggml_input(shape=4, name="a"), g.ggml_input(shape=4, name="b")
    with pytest.raises(GGMLError, match=r"the outputs depend on inputs not listed: \['b'\]"):
        g.ggml_model(inputs=a, outputs=g.ggml_layer_add([a, b]))
