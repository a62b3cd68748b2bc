"""ggmlR tests/testthat/test-chain-sequential-batchnorm.R: dense -> batch_norm chains train.
R's rnorm data are drawn with numpy (same distributions)."""
import numpy as np

import ggmlpy as g


def _data(n, mu, sd, seed):
    rng = np.random.default_rng(seed)
    x = np.vstack([rng.normal(-mu, sd, (n // 2, 2)), rng.normal(mu, sd, (n // 2, 2))])
    y = np.vstack([np.tile([1, 0], (n // 2, 1)), np.tile([0, 1], (n // 2, 1))]).astype(float)
    return x, y


def test_chain_sequential_batchnorm_fit_reduces_loss():
    x, y = _data(100, 1, 0.5, 123)
    m = g.ggml_model_sequential()
    m = g.ggml_layer_dense(m, 16, activation="relu", input_shape=2)
    m = g.ggml_layer_batch_norm(m)
    m = g.ggml_layer_dense(m, 8, activation="relu")
    m = g.ggml_layer_batch_norm(m)
    m = g.ggml_layer_dense(m, 2, activation="softmax")
    m = g.ggml_compile(m, optimizer="adam", loss="categorical_crossentropy")
    h = g.ggml_fit(m, x, y, epochs=100, batch_size=10, verbose=0)
    assert h.history["train_loss"][-1] < h.history["train_loss"][0]


def test_chain_sequential_batchnorm_predict_gives_valid_probabilities():
    x, y = _data(96, 1, 0.5, 123)
    m = g.ggml_model_sequential()
    m = g.ggml_layer_dense(m, 16, activation="relu", input_shape=2)
    m = g.ggml_layer_batch_norm(m)
    m = g.ggml_layer_dense(m, 2, activation="softmax")
    m = g.ggml_compile(m, optimizer="adam", loss="categorical_crossentropy")
    m = g.ggml_fit(m, x, y, epochs=30, batch_size=16, verbose=0)
    p = g.ggml_predict(m, x, batch_size=32)
    assert p.shape[0] == x.shape[0]
    assert p.shape[1] == 2
    assert np.all(np.abs(p.sum(axis=1) - 1.0) < 0.01)
    assert np.all((p >= 0) & (p <= 1))


def test_chain_sequential_batchnorm_accuracy_70_on_separable_data():
    x, y = _data(192, 3, 0.5, 42)
    m = g.ggml_model_sequential()
    m = g.ggml_layer_dense(m, 32, activation="relu", input_shape=2)
    m = g.ggml_layer_batch_norm(m)
    m = g.ggml_layer_dense(m, 2, activation="softmax")
    m = g.ggml_compile(m, optimizer="adam", loss="categorical_crossentropy")
    m = g.ggml_fit(m, x, y, epochs=120, batch_size=32, verbose=0)
    p = g.ggml_predict(m, x, batch_size=32)
    acc = np.mean(p.argmax(1) == y.argmax(1))
    assert acc > 0.7
