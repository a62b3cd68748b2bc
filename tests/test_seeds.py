"""One seed governs every random draw ggmlpy makes: ggml_set_seed (manual_seed) before building
gives the same ag_* layers, Keras-like models (weights and stochastic dropout masks), dataloader
orders and dropout masks; fit's `shuffle=` switches ggml_opt's shuffling as Keras' does."""
import numpy as np
import pytest

import ggmlpy as g


def _keras_model(stochastic=False):
    m = g.ggml_model_sequential()
    m = g.ggml_layer_dense(m, 8, activation="relu", input_shape=4)
    m = g.ggml_layer_dropout(m, 0.5, stochastic=stochastic)
    m = g.ggml_layer_dense(m, 2, activation="softmax")
    return g.ggml_compile(m, optimizer="adam", loss="categorical_crossentropy")


def _values(w: dict) -> list:  # layer by layer (their names count up from model to model)
    return [v[k] for v in w.values() for k in sorted(v)]


def _same(a: dict, b: dict):
    assert len(_values(a)) == len(_values(b))
    for u, v in zip(_values(a), _values(b)):
        np.testing.assert_array_equal(u, v)


def _differ(a: dict, b: dict):
    assert any(not np.array_equal(u, v) for u, v in zip(_values(a), _values(b)))


def test_keras_models_built_after_the_same_seed_have_the_same_weights():
    g.ggml_set_seed(0)
    a = _keras_model().get_weights()
    g.ggml_set_seed(0)
    b = _keras_model().get_weights()
    _same(a, b)
    _differ(a, _keras_model().get_weights())  # the stream moves on


def test_functional_models_too():
    def build():
        inp = g.ggml_input(shape=3)
        out = g.ggml_layer_dense(g.ggml_layer_dense(inp, 5, activation="relu"), 2, activation="softmax")
        return g.ggml_compile(g.ggml_model(inp, out), loss="categorical_crossentropy").get_weights()
    g.manual_seed(7)
    a = build()
    g.manual_seed(7)
    _same(a, build())


def test_stochastic_dropout_masks_in_fit_follow_the_seed():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 4))
    y = np.eye(2)[(x.sum(1) > 0).astype(int)]

    def trained(seed):
        g.ggml_set_seed(seed)
        m = _keras_model(stochastic=True)
        g.ggml_fit(m, x, y, epochs=2, batch_size=16, verbose=0)
        return m.get_weights()
    _same(trained(3), trained(3))
    _differ(trained(3), trained(4))


def test_ag_layers_dataloaders_and_dropout_follow_the_seed():
    def draw():
        lin = g.ag_linear(3, 2)
        order = g.ag_dataloader(np.arange(20.0).reshape(1, 20), batch_size=5).order
        mask = g.ag_dropout(0.5)(np.ones((4, 4))).numpy()
        return lin.W.numpy(), order, mask
    g.ggml_set_seed(11)
    first = draw()
    g.ggml_set_seed(11)
    for u, v in zip(first, draw()):
        np.testing.assert_array_equal(u, v)


@pytest.mark.parametrize("shuffle", [True, False])
def test_fit_shuffle_switch(shuffle):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(40, 4))
    y = np.eye(2)[(x[:, 0] > 0).astype(int)]
    m = _keras_model()
    h = m.fit(x, y, epochs=2, batch_size=8, shuffle=shuffle, record_batch_order=True)
    for order in h.batch_order:
        assert sorted(order) == list(range(40))
        assert (list(order) == list(range(40))) == (not shuffle)
