"""ggmlR tests/testthat/test-model-ops.R: predict_classes, freeze/unfreeze, save/load.
iris comes from scikit-learn (the same 150 rows as R's datasets::iris).

ggmlR's tests compile with loss = "cross_entropy", a name ggmlR does not know (it trains it as
cross-entropy and its evaluate scores NA); ggmlpy refuses unknown names unless
softmax_ce="ggmlr" asks for ggmlR's behaviour, as these ports do."""
import numpy as np
import pytest

import ggmlpy as g
from ggmlpy.errors import GGMLError


def _mlp(units_out=2):
    m = g.ggml_model_sequential()
    m = g.ggml_layer_dense(m, units=8, activation="relu", input_shape=4)
    return g.ggml_layer_dense(m, units=units_out, activation="softmax")


def _xy():
    rng = np.random.default_rng(42)
    x = rng.normal(size=(10, 4))
    y = np.zeros((10, 2))
    y[np.arange(10), rng.integers(0, 2, 10)] = 1
    return x, y


def test_ggml_predict_classes_returns_integer_class_indices():
    datasets = pytest.importorskip("sklearn.datasets")
    iris = datasets.load_iris()
    x = iris.data[:10]
    x = (x - x.mean(0)) / x.std(0, ddof=1)   # R's scale()
    y = np.eye(3)[iris.target[:10]]
    m = g.ggml_compile(_mlp(3), optimizer="adam", loss="cross_entropy", softmax_ce="ggmlr")
    m = g.ggml_fit(m, x, y, epochs=1, batch_size=10, verbose=False)
    classes = g.ggml_predict_classes(m, x)
    assert np.issubdtype(classes.dtype, np.integer)
    assert len(classes) == 10
    assert np.all((classes >= 1) & (classes <= 3))


def test_ggml_freeze_weights_and_ggml_unfreeze_weights_work_for_sequential():
    m = _mlp()
    m_frozen = g.ggml_freeze_weights(m, **{"from": 1, "to": 1})
    assert not m_frozen.layers[0].trainable
    assert m_frozen.layers[1].trainable
    m_unfrozen = g.ggml_unfreeze_weights(m_frozen, **{"from": 1, "to": 1})
    assert m_unfrozen.layers[0].trainable


def test_ggml_freeze_weights_and_ggml_unfreeze_weights_work_for_functional():
    """ggmlR's test passes `layers = "d1"`, which its freeze silently ignores (it then freezes
    every layer); the argument is `layer_names`, and an unknown argument is an error here."""
    x = g.ggml_input(shape=4)
    h = g.ggml_layer_dense(x, 8, name="d1")
    out = g.ggml_layer_dense(h, 2, name="d2")
    m = g.ggml_model(inputs=x, outputs=out)
    m_frozen = g.ggml_freeze_weights(m, layer_names="d1")
    assert isinstance(m_frozen, g.Functional)
    assert not g.ggml_get_layer(m, name="d1").trainable and g.ggml_get_layer(m, name="d2").trainable
    m_unfrozen = g.ggml_unfreeze_weights(m_frozen, layer_names="d1")
    assert isinstance(m_unfrozen, g.Functional)
    assert g.ggml_get_layer(m, name="d1").trainable
    with pytest.raises(TypeError):
        g.ggml_freeze_weights(m, layers="d1")
    with pytest.raises(GGMLError):
        g.ggml_freeze_weights(m, layer_names="nope")


def test_ggml_save_weights_and_ggml_load_weights_roundtrip(tmp_path):
    x, y = _xy()
    m = g.ggml_compile(_mlp(), optimizer="adam", loss="cross_entropy", softmax_ce="ggmlr")
    m = g.ggml_fit(m, x, y, epochs=1, batch_size=10, verbose=False)
    pred_before = g.ggml_predict(m, x)
    tmp = tmp_path / "w.rds"
    g.ggml_save_weights(m, tmp)
    m2 = g.ggml_compile(_mlp(), optimizer="adam", loss="cross_entropy", softmax_ce="ggmlr")
    m2 = g.ggml_load_weights(m2, tmp)
    np.testing.assert_allclose(pred_before, g.ggml_predict(m2, x), rtol=1e-5)


def test_ggml_save_model_and_ggml_load_model_roundtrip_for_sequential(tmp_path):
    x, y = _xy()
    m = g.ggml_compile(_mlp(), optimizer="adam", loss="cross_entropy", softmax_ce="ggmlr")
    m = g.ggml_fit(m, x, y, epochs=1, batch_size=10, verbose=False)
    pred_before = g.ggml_predict(m, x)
    tmp = tmp_path / "m.rds"
    g.ggml_save_model(m, tmp)
    m2 = g.ggml_load_model(tmp)
    np.testing.assert_allclose(pred_before, g.ggml_predict(m2, x), rtol=1e-5)
