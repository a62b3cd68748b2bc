"""ggmlR's tests/testthat/test-ag-save.R: ag_save_model / ag_load_model with model_fn.

ggmlR saves an RDS container with the model_fn closure in it; ggmlpy writes GGUF and stores
model_fn by name (it must be importable, like these module-level builders), never as code.

Blocks of ggmlR's file not ported, and why:
- "test_saved_container_prints_a_summary": R-only: readRDS of the container and its S3 print method.
"""
import json

import numpy as np
import pytest

import ggmlpy as g
from .conftest import expect_equal


def build_mlp():
    return g.ag_sequential(g.ag_linear(4, 8, activation="relu"), g.ag_linear(8, 3, activation=None))


def build_bn():
    return g.ag_sequential(g.ag_linear(4, 8, activation="relu"), g.ag_batch_norm(8),
                           g.ag_linear(8, 3, activation=None))


def train_a_bit(model, rng, n_iter=8):
    opt = g.optimizer_adam(model.parameters(), lr=0.05)
    x = g.ag_tensor(rng.uniform(size=(4, 20)))
    y = np.zeros((3, 20))
    y[rng.integers(0, 3, size=20), np.arange(20)] = 1
    g.ag_train(model)
    for _ in range(n_iter):
        with g.with_grad_tape():
            logits = model.forward(x)
            loss = g.ag_softmax_cross_entropy_loss(logits, y)
        opt.step(g.backward(loss))
        opt.zero_grad()
    g.ag_eval(model)
    return model


def test_ag_save_model_ag_load_model_roundtrip_reproduces_forward_output(tmp_path):
    rng = np.random.default_rng(1)
    g.ggml_set_seed(1)
    m = train_a_bit(build_mlp(), rng)
    xt = g.ag_tensor(rng.uniform(size=(4, 5)))
    out_before = m.forward(xt).data
    f = tmp_path / "m.gguf"
    g.ag_save_model(m, f, model_fn=build_mlp)
    m2 = g.ag_load_model(f)
    expect_equal(m2.forward(xt).data, out_before, rtol=1e-6, atol=0)
    assert isinstance(m2, g.ag_sequential)


def test_batch_norm_running_buffers_survive_the_roundtrip(tmp_path):
    rng = np.random.default_rng(2)
    g.ggml_set_seed(2)
    m = train_a_bit(build_bn(), rng)
    rm_before = m.layers[1].running_mean.data
    rv_before = m.layers[1].running_var.data
    assert not np.allclose(rm_before, np.zeros((8, 1)))  # training moved them off their start
    f = tmp_path / "bn.gguf"
    g.ag_save_model(m, f, model_fn=build_bn)
    m2 = g.ag_load_model(f)
    expect_equal(m2.layers[1].running_mean.data, rm_before)
    expect_equal(m2.layers[1].running_var.data, rv_before)


def test_model_fn_can_be_supplied_at_load_time_instead_of_save_time(tmp_path):
    rng = np.random.default_rng(3)
    g.ggml_set_seed(3)
    m = train_a_bit(build_mlp(), rng)
    xt = g.ag_tensor(rng.uniform(size=(4, 5)))
    out_before = m.forward(xt).data
    f = tmp_path / "m.gguf"
    g.ag_save_model(m, f)  # no model_fn stored
    m2 = g.ag_load_model(f, model_fn=build_mlp)
    expect_equal(m2.forward(xt).data, out_before, rtol=1e-6, atol=0)


class _OwnMlp(g.Module):
    """A model of the user's own layer class: its file has no architecture, as every ggmlR file."""

    def __init__(self):
        super().__init__()
        self.net = build_mlp()

    def forward(self, x):
        return self.net(x)


def test_loading_without_any_model_fn_errors_clearly(tmp_path):
    # ggmlpy divergence: a model of ggmlpy's own layers (build_mlp itself) saves its architecture
    # and loads without model_fn; ggmlR's expectation holds for a model with layers of its own.
    g.ggml_set_seed(4)
    f = tmp_path / "m.gguf"
    g.ag_save_model(_OwnMlp(), f)  # no model_fn
    with pytest.raises(g.GGMLError, match="model_fn"):
        g.ag_load_model(f)
    g.ag_save_model(build_mlp(), f)
    assert repr(g.ag_load_model(f)) == repr(build_mlp())


def test_architecture_mismatch_is_rejected(tmp_path):
    g.ggml_set_seed(5)
    f = tmp_path / "m.gguf"
    g.ag_save_model(build_mlp(), f, model_fn=build_mlp)

    def wrong_arch():
        return g.ag_sequential(g.ag_linear(4, 16), g.ag_linear(16, 3))

    with pytest.raises(g.GGMLError, match="mismatch"):
        g.ag_load_model(f, model_fn=wrong_arch)


def test_ag_save_model_rejects_non_ag_objects(tmp_path):
    with pytest.raises(g.GGMLError, match="ag_sequential"):
        g.ag_save_model([1, 2], tmp_path / "x.gguf")


def test_ag_load_model_rejects_a_non_container_file(tmp_path):
    f = tmp_path / "list.json"
    f.write_text(json.dumps({"a": 1}))  # R: saveRDS(list(a = 1), f)
    with pytest.raises(g.GGMLError, match="container"):
        g.ag_load_model(f, model_fn=build_mlp)


