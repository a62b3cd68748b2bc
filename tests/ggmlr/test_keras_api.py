"""ggmlR tests/testthat/test-keras-api.R: the compile/fit/evaluate/predict generics.
R's generics `compile(m, ...)`, `fit(m, ...)` are methods here: `m.compile(...)`, `m.fit(...)`."""
import numpy as np

import ggmlpy as g

RNG = np.random.default_rng(42)


def _onehot(n, k=2):
    y = np.zeros((n, k))
    y[np.arange(n), RNG.integers(0, k, n)] = 1
    return y


def test_compile_dispatch_works_for_sequential_model():
    m = g.ggml_layer_dense(g.ggml_model_sequential(), units=3, activation="softmax", input_shape=4)
    m = m.compile(optimizer="adam", loss="categorical_crossentropy")
    assert m.compiled


def test_compile_dispatch_works_for_functional_model():
    x = g.ggml_input(shape=4)
    out = g.ggml_layer_dense(x, 3, activation="softmax")
    m = g.ggml_model(inputs=x, outputs=out).compile(optimizer="adam", loss="categorical_crossentropy")
    assert m.compiled


def test_fit_and_evaluate_dispatch_for_sequential_model():
    m = g.ggml_layer_dense(g.ggml_model_sequential(), units=2, activation="softmax", input_shape=4)
    m = m.compile(optimizer="adam", loss="categorical_crossentropy")
    x = RNG.normal(size=(10, 4))
    y = _onehot(10)
    m.fit(x, y, epochs=1, batch_size=10, verbose=False)
    result = m.evaluate(x, y)
    assert isinstance(result, dict)


def test_predict_dispatch_for_sequential_model():
    m = g.ggml_layer_dense(g.ggml_model_sequential(), units=2, activation="softmax", input_shape=4)
    m = m.compile(optimizer="adam", loss="categorical_crossentropy")
    x = RNG.normal(size=(10, 4))
    m.fit(x, _onehot(10), epochs=1, batch_size=10, verbose=False)
    p = m.predict(x)
    assert isinstance(p, np.ndarray) and p.ndim == 2
    assert p.shape[0] == 10


def test_fit_and_predict_dispatch_for_functional_model():
    x_in = g.ggml_input(shape=4)
    out = g.ggml_layer_dense(x_in, 2, activation="softmax")
    m = g.ggml_model(inputs=x_in, outputs=out).compile(optimizer="adam", loss="categorical_crossentropy")
    n = 32
    x = RNG.normal(size=(n, 4))
    m.fit(x, _onehot(n), epochs=1, batch_size=32, verbose=False)
    p = m.predict(x)
    assert isinstance(p, np.ndarray) and p.shape == (32, 2)
