"""Port of ggmlR's tests/testthat/test-diagnostics.R (ggmlR 0.8.2): ggml_training_history() and
ggml_model_backend() on a sequential model trained on iris, on the CPU backend.

These need the Keras-like model API (ggml_model_sequential, ggml_layer_dense, ggml_compile,
ggml_fit), which another issue brings: until it is merged they skip for that reason. R's pipe
`model |> ggml_layer_dense(...)` is the nested call ggml_layer_dense(model, ...).

Blocks of ggmlR's file not ported, and why:
- "diagnostics accessors unwrap a fitted parsnip engine": R-only: parsnip (tidymodels) engine unwrapping.
"""
import numpy as np
import pytest

import ggmlpy

_MODEL_API = all(hasattr(ggmlpy, n) for n in ("ggml_model_sequential", "ggml_layer_dense", "ggml_compile",
                                              "ggml_fit", "ggml_training_history", "ggml_model_backend"))
pytestmark = pytest.mark.skipif(not _MODEL_API, reason="needs the Keras-like model API (another issue)")


def _iris():
    from sklearn.datasets import load_iris
    d = load_iris()
    x = d.data.astype(np.float64)
    y = np.zeros((x.shape[0], 3))
    y[np.arange(x.shape[0]), d.target] = 1
    return x, y


def fit_seq_cpu(epochs=3, validation_split=0.0):
    g = ggmlpy
    model = g.ggml_model_sequential()
    model = g.ggml_layer_dense(model, 8, activation="relu", input_shape=4)
    model = g.ggml_layer_dense(model, 3, activation="softmax")
    model = g.ggml_compile(model, optimizer="adam", loss="categorical_crossentropy", backend="cpu")
    x, y = _iris()
    return g.ggml_fit(model, x=x, y=y, epochs=epochs, batch_size=16, validation_split=validation_split, verbose=0)


def _names(h):
    return list(h.columns) if hasattr(h, "columns") else list(h.keys())


def _col(h, name):
    return np.asarray(h[name])


def test_training_history_wide_format_has_one_row_per_epoch():
    """training_history wide format has one row per epoch"""
    model = fit_seq_cpu(epochs=3)
    h = ggmlpy.ggml_training_history(model)
    assert len(_col(h, "epoch")) == 3
    assert all(n in _names(h) for n in ("epoch", "train_loss", "train_accuracy"))
    np.testing.assert_array_equal(_col(h, "epoch"), [1, 2, 3])


def test_training_history_long_format_reshapes_to_epoch_metric_split_value():
    """training_history long format reshapes to epoch/metric/split/value"""
    model = fit_seq_cpu(epochs=3)
    hl = ggmlpy.ggml_training_history(model, format="long")
    assert all(n in _names(hl) for n in ("epoch", "metric", "split", "value"))
    assert set(_col(hl, "metric").tolist()) == {"loss", "accuracy"}
    assert set(_col(hl, "split").tolist()) == {"train"}  # no validation split
    assert len(_col(hl, "epoch")) == 6


def test_training_history_includes_val_columns_when_validation_split_0():
    """training_history includes val columns when validation_split > 0"""
    model = fit_seq_cpu(epochs=2, validation_split=0.3)
    h = ggmlpy.ggml_training_history(model)
    assert all(n in _names(h) for n in ("val_loss", "val_accuracy"))


def test_training_history_warns_null_for_unfitted_model():
    """training_history warns + NULL for unfitted model"""
    model = ggmlpy.ggml_layer_dense(ggmlpy.ggml_model_sequential(), 4, activation="relu", input_shape=4)
    with pytest.warns(Warning, match="no training history"):
        res = ggmlpy.ggml_training_history(model)
    assert res is None


def test_model_backend_reports_cpu_and_full_detail_list():
    """model_backend reports cpu and full detail list"""
    model = fit_seq_cpu(epochs=1)
    assert ggmlpy.ggml_model_backend(model) == "cpu"
    info = ggmlpy.ggml_model_backend(model, verbose=True)
    assert info["requested"] == "cpu"
    assert info["used"] == "cpu"
    assert info["device"] == "cpu"
    assert not info["fallback"]


def test_model_backend_errors_on_uncompiled_model():
    """model_backend errors on uncompiled model"""
    model = ggmlpy.ggml_layer_dense(ggmlpy.ggml_model_sequential(), 4, activation="relu", input_shape=4)
    with pytest.raises(Exception, match="not compiled"):
        ggmlpy.ggml_model_backend(model)


