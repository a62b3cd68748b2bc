"""ggml_marshal_model / ggml_unmarshal_model and pickling of Keras-like models.

The first two tests are the marshal blocks of ggmlR's test-mlr3-learner.R (the rest of that file
drives mlr3 learners: R-only); the format tag is ggmlpy's own (see ggmlpy/keras/marshal.py)."""
import pickle
import subprocess
import sys

import numpy as np
import pytest

import ggmlpy as g
from ggmlpy.errors import GGMLError

rng = np.random.default_rng(42)


def small_mlp(n_features=4, n_out=3, hidden=(8,)):
    m = g.ggml_default_mlp(n_features=n_features, n_out=n_out, task_type="classif", hidden_layers=hidden)
    return g.ggml_compile(m, optimizer="adam", loss="categorical_crossentropy", backend="cpu")


def data(n=10, f=4, k=3):
    return rng.standard_normal((n, f)), np.eye(k)[rng.integers(0, k, n)]


def test_ggml_marshal_model_ggml_unmarshal_model_roundtrip_on_sequential():
    x, y = data()
    m = g.ggml_fit(small_mlp(), x, y, epochs=1, batch_size=10, verbose=0)
    blob = g.ggml_marshal_model(m)
    assert isinstance(blob, g.MarshaledModel)
    assert blob["format"] == "ggmlpy.marshal"
    assert blob["version"] == 1
    assert blob["api"] == "sequential"
    assert isinstance(blob["payload"], bytes)
    assert len(blob["payload"]) > 0

    m2 = g.ggml_unmarshal_model(blob, backend="cpu")
    assert isinstance(m2, g.Sequential)
    assert m2.compiled
    p1, p2 = g.ggml_predict(m, x), g.ggml_predict(m2, x)
    assert p1.shape == p2.shape
    assert np.abs(p1 - p2).max() < 1e-5


def test_ggml_unmarshal_model_detects_a_corrupted_payload_via_sha256():
    blob = g.ggml_marshal_model(small_mlp(3, 2, (4,)))
    payload = bytearray(blob["payload"])
    payload[0] ^= 0xFF
    blob["payload"] = bytes(payload)
    with pytest.raises(GGMLError, match="checksum mismatch"):
        g.ggml_unmarshal_model(blob, backend="cpu")


def test_functional_model_with_a_shared_layer_round_trips():
    xa, xb = g.ggml_input(shape=3), g.ggml_input(shape=3)
    enc = g.ggml_dense(4, activation="tanh", name="enc")
    out = g.ggml_layer_dense(g.ggml_layer_add([g.ggml_apply(xa, enc), g.ggml_apply(xb, enc)]), 2,
                             activation="softmax")
    m = g.ggml_compile(g.ggml_model(inputs=[xa, xb], outputs=out), loss="categorical_crossentropy")
    a, b = rng.standard_normal((32, 3)), rng.standard_normal((32, 3))
    blob = g.ggml_marshal_model(m)
    assert blob["api"] == "functional" and blob["backend"] == "cpu"
    m2 = g.ggml_unmarshal_model(blob)
    assert isinstance(m2, g.Functional)
    assert len(m2._all_layers()) == len(m._all_layers())        # still one shared "enc"
    np.testing.assert_array_equal(g.ggml_predict(m2, [a, b]), g.ggml_predict(m, [a, b]))


def test_an_uncompiled_model_stays_uncompiled():
    m = g.ggml_layer_dense(g.ggml_model_sequential(), 2, input_shape=3)
    blob = g.ggml_marshal_model(m)
    assert blob["backend"] is None
    m2 = g.ggml_unmarshal_model(blob)
    assert not m2.compiled
    w1, w2 = m.get_weights(), m2.get_weights()
    assert w1.keys() == w2.keys()
    for name in w1:
        for k in w1[name]:
            np.testing.assert_array_equal(w1[name][k], w2[name][k])


def test_pickle_keeps_weights_compile_settings_and_history():
    x, y = data(20)
    m = g.ggml_fit(small_mlp(), x, y, epochs=2, batch_size=10, verbose=0)
    m2 = pickle.loads(pickle.dumps(m))
    assert m2 is not m and m2.compiled and m2.loss == m.loss and m2.device == "cpu"
    np.testing.assert_array_equal(g.ggml_predict(m2, x), g.ggml_predict(m, x))
    assert list(m2.history["train_loss"]) == list(m.history["train_loss"])
    g.ggml_fit(m2, x, y, epochs=1, batch_size=10, verbose=0)     # and it trains on
    assert not np.array_equal(g.ggml_predict(m2, x), g.ggml_predict(m, x))


def test_a_pickled_model_predicts_the_same_in_another_process():
    x, _ = data()
    m = small_mlp()
    code = ("import pickle, sys, numpy as np; m, x = pickle.loads(sys.stdin.buffer.read()); "
            "sys.stdout.buffer.write(pickle.dumps(m.predict(x)))")
    out = subprocess.run([sys.executable, "-c", code], input=pickle.dumps((m, x)), capture_output=True,
                         check=True, timeout=120)
    np.testing.assert_array_equal(pickle.loads(out.stdout), g.ggml_predict(m, x))


def test_bad_containers_and_models_are_refused():
    blob = g.ggml_marshal_model(small_mlp())
    with pytest.raises(GGMLError, match="not a ggmlpy marshaled container"):
        g.ggml_unmarshal_model({"format": "ggmlR.marshal", "version": 1, "payload": b"x"})
    with pytest.raises(GGMLError, match="not a ggmlpy marshaled container"):
        g.ggml_unmarshal_model(blob["payload"])
    with pytest.raises(GGMLError, match="version"):
        g.ggml_unmarshal_model({**blob, "version": 2})
    with pytest.raises(GGMLError, match="empty"):
        g.ggml_unmarshal_model({**blob, "payload": b""})
    with pytest.raises(GGMLError, match="cannot read"):    # no checksum to catch it: the reader must
        g.ggml_unmarshal_model({**blob, "payload": b"not an npz", "sha256": None})
    with pytest.raises(GGMLError, match="unsupported model class"):
        g.ggml_marshal_model(g.ag_linear(2, 2))
