"""ggmlpy's one model file (ggmlpy/io/model_file.py): GGUF for ag models and Keras-like models
alike, written atomically once, checked when read; the Keras-like models' earlier .npz files
(tests/keras_npz, written by that format's code) still load."""
import json
import pathlib
import warnings

import numpy as np
import pytest

import ggmlpy as g
from ggmlpy.errors import GGMLError
from ggmlpy.io import model_file

gguf = pytest.importorskip("gguf")
NPZ = pathlib.Path(__file__).resolve().parent / "keras_npz"
RNG = np.random.default_rng(11)


def cnn():
    m = g.ggml_model_sequential()
    m = g.ggml_layer_conv_2d(m, 3, 3, activation="relu", padding="same", input_shape=(6, 5, 2))
    m = g.ggml_layer_batch_norm(m, mode="batch")
    m = g.ggml_layer_max_pooling_2d(m, 2)
    m = g.ggml_layer_flatten(m)
    m = g.ggml_layer_dense(m, 4, activation="tanh", name="a_rather_long_layer_name_that_no_gguf_tensor_name_could_hold_whole")
    m = g.ggml_layer_dense(m, 2, activation="softmax")
    m._rng = np.random.default_rng(0)
    return g.ggml_compile(m, optimizer="sgd", lr=0.05)


def trained_cnn():
    m = cnn()
    x = RNG.uniform(0, 1, (8, 6, 5, 2))
    m.fit(x, np.eye(2)[RNG.integers(0, 2, 8)], epochs=2, batch_size=4)
    return m, x


def fields(path):
    r = gguf.GGUFReader(str(path))
    return {k: f.contents() for k, f in r.fields.items() if k.startswith(("general.", "ggmlpy."))}, \
        {t.name: t for t in r.tensors}


def test_ggml_save_model_writes_a_gguf_model_file_with_its_architecture(tmp_path):
    m, x = trained_cnn()
    path = tmp_path / "cnn.gguf"
    assert g.ggml_save_model(m, path) is m
    keys, tensors = fields(path)
    assert keys["general.architecture"] == "ggmlpy" and keys["ggmlpy.kind"] == "keras.model"
    assert keys["ggmlpy.version"] == g.__version__
    arch = json.loads(keys["ggmlpy.architecture"])
    assert arch["type"] == "sequential" and [s["kind"] for s in arch["layers"]][:2] == ["conv_2d", "batch_norm"]
    index = json.loads(keys["ggmlpy.keras.weights"])
    weights = m.get_weights()
    assert sorted((ln, p) for _, ln, p in index) == sorted((ln, p) for ln, ps in weights.items() for p in ps)
    for name, ln, p in index:  # ggml's ne: the numpy shape reversed, the values as they are
        assert [int(d) for d in tensors[name].shape] == list(weights[ln][p].shape[::-1])
        np.testing.assert_array_equal(np.asarray(tensors[name].data).ravel(), weights[ln][p].ravel())
    m2 = g.ggml_load_model(path)
    np.testing.assert_array_equal(g.ggml_predict(m2, x, 4), g.ggml_predict(m, x, 4))
    assert m2.opt_settings == m.opt_settings and m2.ggml_optimizer == "sgd"


def test_weights_files_and_model_bytes_are_model_files_too(tmp_path):
    m, x = trained_cnn()
    g.ggml_save_weights(m, tmp_path / "w.gguf")
    keys, _ = fields(tmp_path / "w.gguf")
    assert keys["ggmlpy.kind"] == "keras.weights" and "ggmlpy.architecture" not in keys
    fresh = cnn()
    g.ggml_load_weights(fresh, tmp_path / "w.gguf")
    np.testing.assert_array_equal(g.ggml_predict(fresh, x, 4), g.ggml_predict(m, x, 4))
    blob = g.ggml_marshal_model(m)
    assert model_file.is_model_file(blob["payload"])
    np.testing.assert_array_equal(g.ggml_predict(g.ggml_unmarshal_model(blob), x, 4), g.ggml_predict(m, x, 4))


def test_the_earlier_npz_files_still_load():
    want = np.load(NPZ / "expected.npz")
    m = g.ggml_load_model(NPZ / "sequential.npz")
    np.testing.assert_allclose(g.ggml_predict(m, want["x"], 4), want["sequential"], rtol=1e-6, atol=1e-7)
    assert m.ggml_optimizer == "sgd" and m.opt_settings["lr"] == pytest.approx(0.05)  # kept as float32
    fresh = cnn()
    g.ggml_load_weights(fresh, NPZ / "sequential_weights.npz")
    np.testing.assert_allclose(g.ggml_predict(fresh, want["x"], 4), want["sequential"], rtol=1e-6, atol=1e-7)
    f = g.ggml_load_model(NPZ / "functional.npz")
    np.testing.assert_allclose(g.ggml_predict(f, [want["xa"], want["xb"]], 4), want["functional"],
                               rtol=1e-6, atol=1e-7)
    with pytest.raises(GGMLError, match="weights only"):
        g.ggml_load_model(NPZ / "sequential_weights.npz")


def test_a_file_of_another_kind_names_the_function_that_loads_it(tmp_path):
    m, _ = trained_cnn()
    g.ggml_save_model(m, tmp_path / "k.gguf")
    g.ggml_save_weights(m, tmp_path / "w.gguf")
    g.ag_save_model(g.ag_linear(3, 2), tmp_path / "ag.gguf")
    with pytest.raises(GGMLError, match=r"holds a Keras-like model \(written by ggml_save_model\).*use ggml_load_model"):
        g.ag_load_model(g.ag_linear(3, 2), tmp_path / "k.gguf")
    with pytest.raises(GGMLError, match="holds an ag_\\* model .*use ag_load_model"):
        g.ggml_load_model(tmp_path / "ag.gguf")
    with pytest.raises(GGMLError, match="holds the weights of a Keras-like model .*use ggml_load_weights"):
        g.ggml_load_model(tmp_path / "w.gguf")
    assert fields(tmp_path / "ag.gguf")[0]["ggmlpy.kind"] == "ag"


def _rewrite(src, dst, edit_keys=None, edit_tensors=None, seal=True):
    """src rewritten with the gguf package, its ggmlpy.* keys and tensors edited; with `seal`, the
    digest of what it then holds written in (the checks behind the digest are what is tested),
    else none (as in files written before digests)."""
    keys, tensors = fields(src)
    keys = {k: v for k, v in keys.items() if k.startswith("ggmlpy.") and k != model_file.DIGEST_KEY}
    if seal:
        keys[model_file.DIGEST_KEY] = model_file.PLACEHOLDER
    arrays = {name: np.array(t.data).reshape([int(d) for d in t.shape][::-1]) for name, t in tensors.items()}
    keys = edit_keys(keys) if edit_keys else keys
    arrays = edit_tensors(arrays) if edit_tensors else arrays
    w = gguf.GGUFWriter(str(dst), "ggmlpy")
    for k, v in keys.items():
        w.add_string(k, v)
    for name, a in arrays.items():
        w.add_tensor(name, np.ascontiguousarray(a, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    if seal and model_file.DIGEST_KEY in keys:
        model_file.seal(str(dst))
    return dst


def _saved(kind, tmp_path):
    """(path, load, predict): a model of `kind` saved, how to load it, and its predictions from a loaded copy."""
    path = tmp_path / f"{kind}.gguf"
    if kind == "ag":
        g.manual_seed(3)
        model = g.ag_sequential(g.ag_linear(4, 6, "tanh"), g.ag_linear(6, 2))
        g.ag_save_model(model, path)
        x = g.ag_tensor(RNG.normal(size=(4, 5)))
        return path, g.ag_load_model, lambda loaded: loaded(x).numpy(), model(x).numpy()
    m, x = trained_cnn()
    if kind == "keras.model":
        g.ggml_save_model(m, path)
        return path, g.ggml_load_model, lambda loaded: g.ggml_predict(loaded, x, 4), g.ggml_predict(m, x, 4)
    g.ggml_save_weights(m, path)

    def load(p):
        fresh = cnn()
        g.ggml_load_weights(fresh, p)
        return fresh
    return path, load, lambda loaded: g.ggml_predict(loaded, x, 4), g.ggml_predict(m, x, 4)


def _flipped(path, dst, offset):
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x10
    dst.write_bytes(bytes(data))
    return dst


@pytest.mark.parametrize("kind", ["ag", "keras.model", "keras.weights"])
def test_a_saved_model_comes_back_bit_for_bit_or_not_at_all(tmp_path, kind):
    """Every tensor's bytes and the architecture are under the digest: a changed byte anywhere in
    them is an error naming the file, never a model with other predictions."""
    path, load, predict, want = _saved(kind, tmp_path)
    assert fields(path)[0][model_file.DIGEST_KEY].startswith(model_file.DIGEST + ":")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a file with its digest loads without a word
        np.testing.assert_array_equal(predict(load(path)), want)
    with g.gguf_load(str(path)) as f:
        offsets = [t.file_offset + t.nbytes // 2 for t in f.tensors.values()]
    head = path.read_bytes()[:offsets[0]]
    for word in (b'"tanh"', b'"relu"'):  # a layer's activation, where the architecture names one
        if word in head:
            offsets.append(head.index(word) + 2)
    for i, offset in enumerate(offsets):
        bad = _flipped(path, tmp_path / f"bad{i}.gguf", offset)
        with pytest.raises(GGMLError, match=f"bad{i}.gguf: .*do not match the digest"):
            load(bad)


def test_a_file_without_a_digest_loads_with_one_warning(tmp_path):
    m, x = trained_cnn()
    g.ggml_save_model(m, tmp_path / "m.gguf")
    old = _rewrite(tmp_path / "m.gguf", tmp_path / "old.gguf", seal=False)
    assert model_file.DIGEST_KEY not in fields(old)[0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = g.ggml_load_model(old)
    about = [str(w.message) for w in caught if "digest" in str(w.message)]
    assert len(about) == 1 and "old.gguf has no digest" in about[0]
    np.testing.assert_array_equal(g.ggml_predict(loaded, x, 4), g.ggml_predict(m, x, 4))


def test_the_digest_is_the_writers_own_key():
    with pytest.raises(GGMLError, match="written by ggmlpy itself"):
        model_file.write_model_file("x.gguf", "ag", [], {model_file.DIGEST_KEY: "sha256:0"}, "ag_save_model")


def _arch_edit(fn):
    def edit(keys):
        arch = json.loads(keys["ggmlpy.architecture"])
        fn(arch)
        return dict(keys, **{"ggmlpy.architecture": json.dumps(arch)})
    return edit


@pytest.mark.parametrize("what,edit_keys,edit_tensors,match", [
    ("faithful", None, None, None),
    ("architecture not JSON", lambda k: dict(k, **{"ggmlpy.architecture": "{not json"}), None, "not valid JSON"),
    ("architecture missing", lambda k: {n: v for n, v in k.items() if n != "ggmlpy.architecture"}, None,
     "without its ggmlpy.architecture"),
    ("unknown model type", _arch_edit(lambda a: a.update(type="graph")), None, "sequential or functional"),
    ("unknown layer kind", _arch_edit(lambda a: a["layers"][0].update(kind="warp")), None, "unknown layer kind"),
    ("config a constructor refuses", _arch_edit(lambda a: a["layers"][0]["config"].update(colour=1)), None,
     "damaged"),
    ("bad config value", _arch_edit(lambda a: a["layers"][0]["config"].update(padding="mirror")), None,
     "cannot be built again.*padding"),
    ("compile settings cut", _arch_edit(lambda a: a["compile"].pop("lr")), None, "compile settings"),
    ("weights index not a list", lambda k: dict(k, **{"ggmlpy.keras.weights": '{"a": 1}'}), None,
     "not a list of"),
    ("weights index names a missing tensor", None, lambda t: {n: a for n, a in t.items() if n != "0.kernel"},
     "does not hold"),
    ("a weight of another shape", None, lambda t: dict(t, **{"0.bias": np.zeros(7)}), "architecture mismatch"),
    ("unknown kind", lambda k: dict(k, **{"ggmlpy.kind": "onnx"}), None, "unknown model file kind"),
])
def test_a_damaged_keras_model_file_is_a_clear_error(tmp_path, what, edit_keys, edit_tensors, match):
    m, x = trained_cnn()
    src = tmp_path / "m.gguf"
    g.ggml_save_model(m, src)
    bad = _rewrite(src, tmp_path / "bad.gguf", edit_keys, edit_tensors)
    if match is None:
        np.testing.assert_array_equal(g.ggml_predict(g.ggml_load_model(bad), x, 4), g.ggml_predict(m, x, 4))
        return
    with pytest.raises(GGMLError, match=match) as e:
        g.ggml_load_model(bad)
    assert "bad.gguf" in str(e.value)


def test_a_damaged_functional_graph_is_a_clear_error(tmp_path):
    a = g.ggml_input(shape=3, name="a")
    f = g.ggml_compile(g.ggml_model(a, g.ggml_layer_dense(g.ggml_layer_dense(a, 2), 2, activation="softmax")))
    g.ggml_save_model(f, tmp_path / "f.gguf")
    for edit, match in [(lambda a: a["nodes"][1].update(parents=[5]), "parents"),
                        (lambda a: a["nodes"][2].update(layer=9), "layer"),
                        (lambda a: a.update(outputs=[-1]), "outputs")]:
        bad = _rewrite(tmp_path / "f.gguf", tmp_path / "bad.gguf", _arch_edit(edit))
        with pytest.raises(GGMLError, match=match):
            g.ggml_load_model(bad)


def test_truncated_and_foreign_files_are_clear_errors(tmp_path):
    m, _ = trained_cnn()
    g.ggml_save_model(m, tmp_path / "m.gguf")
    data = (tmp_path / "m.gguf").read_bytes()
    (tmp_path / "cut.gguf").write_bytes(data[:len(data) // 2])
    with pytest.raises(GGMLError, match="not a readable GGUF file.*truncated"):
        g.ggml_load_model(tmp_path / "cut.gguf")
    with pytest.raises(GGMLError, match="not a readable GGUF"):
        g.ggml_unmarshal_model({**g.ggml_marshal_model(m), "payload": data[:100], "sha256": None})
    (tmp_path / "junk.bin").write_bytes(b"\x00" * 64)
    with pytest.raises(GGMLError, match="cannot read"):
        g.ggml_load_model(tmp_path / "junk.bin")
    with pytest.raises(GGMLError, match="cannot read"):
        g.ggml_load_model(tmp_path / "missing.gguf")
    w = gguf.GGUFWriter(str(tmp_path / "llama.gguf"), "llama")
    w.add_tensor("W", np.zeros((2, 2), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(GGMLError, match="not a ggmlpy model file"):
        g.ggml_load_weights(cnn(), tmp_path / "llama.gguf")
    w = gguf.GGUFWriter(str(tmp_path / "int.gguf"), "ggmlpy")
    w.add_uint32("ggmlpy.kind", 1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(GGMLError, match="ggmlpy.kind must be a string, is uint32"):
        g.ggml_load_model(tmp_path / "int.gguf")


@pytest.mark.parametrize("save", ["ggml_save_model", "ggml_save_weights", "ag_save_model"])
def test_a_failed_save_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch, save):
    path = tmp_path / "model.gguf"
    model = cnn() if save != "ag_save_model" else g.ag_linear(3, 2)
    getattr(g, save)(model, path)
    before = path.read_bytes()
    write = model_file._write

    def half_then_fail(tmp, *a):
        write(tmp, *a)
        with open(tmp, "r+b") as f:
            f.truncate(100)
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(model_file, "_write", half_then_fail)
    with pytest.raises(GGMLError, match="could not write .*unchanged"):
        getattr(g, save)(model, path)
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["model.gguf"]


def test_saved_files_get_the_usual_mode_not_a_private_one(tmp_path):
    import os
    umask = os.umask(0o022)
    try:
        g.ggml_save_model(cnn(), tmp_path / "m.gguf")
    finally:
        os.umask(umask)
    assert (tmp_path / "m.gguf").stat().st_mode & 0o777 == 0o644


def test_tensor_names_are_checked_before_anything_is_written(tmp_path):
    with pytest.raises(GGMLError, match="longer than GGUF's 63 bytes"):
        model_file.write_model_file(tmp_path / "x.gguf", "ag", [("n" * 64, np.zeros(2), None)], {}, "test")
    with pytest.raises(GGMLError, match="two tensors are named"):
        model_file.write_model_file(tmp_path / "x.gguf", "ag", [("a", np.zeros(2), None)] * 2, {}, "test")
    with pytest.raises(GGMLError, match="strings named ggmlpy"):
        model_file.write_model_file(tmp_path / "x.gguf", "ag", [], {"general.name": "x"}, "test")
    assert not list(tmp_path.iterdir())
