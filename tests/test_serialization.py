"""GGUF model files: round trips of every layer type, metadata, and the errors for a file that
does not fit the model."""
import numpy as np
import pytest

import ggmlpy as g

gguf = pytest.importorskip("gguf")
rng = np.random.default_rng(11)


def x_of(rows, cols=5):
    return g.ag_tensor(rng.normal(size=(rows, cols)))


def train_a_little(model, run, steps=2):
    """Move every parameter (and batch norm's running statistics) away from its initial value."""
    opt = g.optimizer_adam(model.parameters(), lr=0.05)
    for _ in range(steps):
        with g.with_grad_tape():
            y = run(model)
            loss = g.ag_mean(g.ag_mul(y, y))
        opt.step(g.backward(loss))
        opt.zero_grad()


def round_trip(tmp_path, make, x, forward=None, metadata=None):
    """Save a trained model, load it into a fresh one, compare state and outputs exactly."""
    run = forward or (lambda m: m(x))
    g.manual_seed(1)
    model = make()
    train_a_little(model, run)
    g.ag_eval(model)
    path = tmp_path / "model.gguf"
    g.ag_save_model(model, path, metadata=metadata)

    g.manual_seed(2)  # a different initialisation, overwritten by the load
    fresh = make()
    g.ag_eval(fresh)
    meta = g.ag_load_model(fresh, path)
    a, b = model.state_dict(), fresh.state_dict()
    assert list(a) == list(b)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    np.testing.assert_array_equal(run(model).numpy(), run(fresh).numpy())
    return model, fresh, meta, path


def test_linear(tmp_path):
    round_trip(tmp_path, lambda: g.ag_linear(4, 3, "tanh"), x_of(4))


def test_batch_norm_with_running_stats(tmp_path):
    model, fresh, _, _ = round_trip(tmp_path, lambda: g.ag_batch_norm(4), x_of(4, 8))
    assert "running_mean" in model.state_dict()
    assert not np.allclose(fresh.running_mean.numpy(), 0)  # the trained statistics came back


def test_embedding(tmp_path):
    idx = np.array([0, 3, 5, 3])
    round_trip(tmp_path, lambda: g.ag_embedding(6, 4), None, forward=lambda m: m(idx))


def test_multihead_attention(tmp_path):
    round_trip(tmp_path, lambda: g.ag_multihead_attention(8, 2, causal=True), x_of(8, 6))


def test_layer_norm_layer(tmp_path):
    round_trip(tmp_path, lambda: g.ag_layer_norm_layer(5), x_of(5))


def test_sequential_of_mixed_layers_includes_nested_buffers(tmp_path):
    def make():
        return g.ag_sequential(g.ag_linear(6, 8, "relu"), g.ag_batch_norm(8), g.ag_dropout(0.3),
                               g.ag_layer_norm_layer(8), g.ag_activation("gelu"), g.ag_linear(8, 3))
    model, _, _, _ = round_trip(tmp_path, make, x_of(6, 7))
    names = list(model.state_dict())
    assert "layer2_running_mean" in names and "layer2_running_var" in names
    assert names[:2] == ["layer1_W", "layer1_b"]


def test_custom_module_with_attribute_layers(tmp_path):
    class Net(g.Module):
        def __init__(self):
            super().__init__()
            self.emb = g.ag_embedding(10, 8)
            self.attn = g.ag_multihead_attention(8, 4)
            self.blocks = [g.ag_linear(8, 8, "relu"), g.ag_batch_norm(8)]
            self.out = g.ag_linear(8, 2)

        def forward(self, idx):
            h = self.attn(self.emb(idx))
            for b in self.blocks:
                h = b(h)
            return self.out(h)

    idx = np.array([1, 4, 4, 9, 0])
    model, _, _, _ = round_trip(tmp_path, Net, None, forward=lambda m: m(idx))
    assert len(model.parameters()) == 1 + 5 + 2 + 2 + 2


def test_metadata_and_version(tmp_path):
    meta = {"epochs": 3, "note": "digits", "classes": list(range(10)), "lr": 1e-3}
    _, _, got, path = round_trip(tmp_path, lambda: g.ag_linear(3, 2), x_of(3), metadata=meta)
    assert got == meta
    reader = gguf.GGUFReader(str(path))
    assert reader.fields["ggmlpy.version"].contents() == g.__version__
    assert reader.fields["general.architecture"].contents() == "ggmlpy"


def test_layout_is_ggml_order(tmp_path):
    """An R matrix [nrow, ncol] is stored with ne = [nrow, ncol], column-major: ggml's own layout."""
    lin = g.ag_linear(3, 2)
    lin.W.data = np.arange(6.0).reshape(2, 3)
    path = tmp_path / "w.gguf"
    g.ag_save_model(lin, path)
    t = {t.name: t for t in gguf.GGUFReader(str(path)).tensors}["W"]
    assert [int(d) for d in t.shape] == [2, 3]
    np.testing.assert_array_equal(np.asarray(t.data).ravel(), np.arange(6.0).reshape(2, 3).ravel(order="F"))


def test_shape_mismatch_is_a_clear_error(tmp_path):
    path = tmp_path / "m.gguf"
    g.ag_save_model(g.ag_linear(4, 3), path)
    target = g.ag_linear(4, 5)
    before = target.W.numpy()
    with pytest.raises(g.GGMLError, match=r"W: the file has shape \[3, 4\], the model \[5, 4\]"):
        g.ag_load_model(target, path)
    np.testing.assert_array_equal(target.W.numpy(), before)  # nothing written on failure


def test_missing_and_unexpected_tensors(tmp_path):
    path = tmp_path / "m.gguf"
    g.ag_save_model(g.ag_sequential(g.ag_linear(4, 3)), path)
    with pytest.raises(g.GGMLError, match=r"missing from the file: \['layer2_W', 'layer2_b'\]\)"):
        g.ag_load_model(g.ag_sequential(g.ag_linear(4, 3), g.ag_linear(3, 3)), path)
    g.ag_save_model(g.ag_sequential(g.ag_linear(4, 3), g.ag_batch_norm(3)), path)
    with pytest.raises(g.GGMLError, match="in the file but not in the model"):
        g.ag_load_model(g.ag_sequential(g.ag_linear(4, 3)), path)
    g.ag_load_model(g.ag_sequential(g.ag_linear(4, 3)), path, strict=False)


def test_not_a_model_file(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file at all")
    with pytest.raises(g.GGMLError, match="not a readable GGUF"):
        g.ag_load_model(g.ag_linear(2, 2), bad)
    with pytest.raises(g.GGMLError, match="no such model file"):
        g.ag_load_model(g.ag_linear(2, 2), tmp_path / "nope.gguf")
    other = tmp_path / "other.gguf"
    w = gguf.GGUFWriter(str(other), "llama")
    w.add_tensor("W", np.zeros((2, 2), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(g.GGMLError, match="not a ggmlpy model file"):
        g.ag_load_model(g.ag_linear(2, 2), other)


def test_metadata_must_be_json(tmp_path):
    with pytest.raises(g.GGMLError, match="JSON"):
        g.ag_save_model(g.ag_linear(2, 2), tmp_path / "m.gguf", metadata={"f": object()})


# -- ag_load_model(path): ggmlpy's own layers rebuild without model_fn ---------------------------------
BUILT_IN_MODELS = {
    "linear": (lambda: g.ag_linear(4, 3, "tanh"), lambda: x_of(4)),
    "sequential": (lambda: g.ag_sequential(g.ag_linear(6, 8, "relu"), g.ag_batch_norm(8, momentum=0.2),
                                           g.ag_dropout(0.3), g.ag_layer_norm_layer(8, eps=1e-4),
                                           g.ag_activation("gelu"), g.ag_linear(8, 3)), lambda: x_of(6, 7)),
    "nested": (lambda: g.ag_sequential([g.ag_sequential(g.ag_linear(np.int64(5), 4)), g.ag_silu_layer()]),
               lambda: x_of(5)),
    "attention": (lambda: g.ag_multihead_attention(8, 2, causal=True, bias=False, qkv_bias=True),
                  lambda: x_of(8, 6)),
    "transformer_block": (lambda: g.ag_transformer_block(8, 2, mlp_ratio=2, activation="relu"),
                          lambda: x_of(8, 5)),
    "gpt": (lambda: g.ag_gpt(20, d_model=8, n_heads=2, n_layers=2, context=6), lambda: np.array([[1, 4, 7, 2]]).T),
}


@pytest.mark.parametrize("name", list(BUILT_IN_MODELS))
def test_builtin_layers_load_without_model_fn(tmp_path, name):
    make, inputs = BUILT_IN_MODELS[name]
    x = inputs()
    g.manual_seed(1)
    model = make()
    train_a_little(model, lambda m: m(x) if name != "gpt" else m.loss(x, x))
    g.ag_eval(model)
    path = g.ag_save_model(model, tmp_path / "m.gguf")
    g.manual_seed(2)
    back = g.ag_load_model(path)
    assert type(back) is type(model) and repr(back) == repr(model) and not back.training
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(back.state_dict()[k], v, err_msg=k)
    np.testing.assert_array_equal(back(x).numpy(), model(x).numpy())


def test_own_layers_still_need_model_fn(tmp_path):
    class Twice(g.Module):
        def __init__(self):
            super().__init__()
            self.lin = g.ag_linear(3, 3)

        def forward(self, x):
            return self.lin(self.lin(x))

    for model in (Twice(), g.ag_sequential(g.ag_linear(3, 3), Twice())):
        path = g.ag_save_model(model, tmp_path / "own.gguf")
        with pytest.raises(g.GGMLError, match="neither an architecture .* nor a model_fn: pass model_fn="):
            g.ag_load_model(path)


def test_a_setting_changed_after_building_is_not_rebuilt_silently(tmp_path):
    model = g.ag_sequential(g.ag_linear(3, 4, "relu"), g.ag_linear(4, 2))
    model.layers[0].activation = "tanh"   # not what the constructor was told
    path = g.ag_save_model(model, tmp_path / "m.gguf")
    with pytest.raises(g.GGMLError, match="a setting changed after it was built.*pass model_fn="):
        g.ag_load_model(path)
    back = g.ag_load_model(path, model_fn=lambda: g.ag_sequential(g.ag_linear(3, 4, "tanh"), g.ag_linear(4, 2)))
    x = x_of(3)
    np.testing.assert_array_equal(back(x).numpy(), model(x).numpy())


@pytest.mark.parametrize("bad,match", [("{", "not valid JSON"), ('{"x": 1}', "no model description"),
                                       ('{"model": {"layer": "os.system", "args": {}}}', "unknown layer"),
                                       ('{"model": {"layer": "ag_linear", "args": {"nope": 1}}}', "cannot be built"),
                                       ('{"model": {"layer": "ag_linear", "args": {"in_features": -1, '
                                        '"out_features": 2}}}', "ag_linear")])
def test_a_damaged_architecture_is_a_clear_error(tmp_path, bad, match):
    path = tmp_path / "m.gguf"
    w = gguf.GGUFWriter(str(path), "ggmlpy")
    w.add_string("ggmlpy.architecture", bad)
    w.add_tensor("W", np.zeros((2, 2), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(g.GGMLError, match=match):
        g.ag_load_model(path)
