"""The smaller differences a ported ggmlR script hits (issue: ggmlR's own example scripts):
nested device capabilities, a compiled model's scheduler and backend, evaluate(verbose=),
nn_infer_shapes, ggml_test's output, printing Functional models and summaries, fit's progress
bar, unknown loss names, the dataloader's layout hint, and the registry order (docs/devices.md)."""
import re
from pathlib import Path

import numpy as np
import pytest

import ggmlpy as g

ROOT = Path(__file__).resolve().parents[1]
rng = np.random.default_rng(0)
X = rng.normal(size=(64, 4))
Y = np.eye(3)[(X[:, 0] > 0).astype(int) + (X[:, 1] > 0)]


def _seq(compile_=True, **kw):
    m = g.ggml_model_sequential()
    m = g.ggml_layer_dense(m, 8, activation="relu", input_shape=4)
    m = g.ggml_layer_dense(m, 3, activation="softmax")
    return g.ggml_compile(m, optimizer="adam", loss="categorical_crossentropy", **kw) if compile_ else m


def test_device_props_have_ggmlrs_nested_caps_and_the_flat_keys():
    props = g.ggml_backend_dev_get_props(g.ggml_backend_dev_by_type(g.ggml_backend_device_type_cpu()))
    assert set(props["caps"]) == {"async", "host_buffer", "buffer_from_host_ptr", "events", "mmap_support"}
    for k, v in props["caps"].items():
        assert props[f"caps_{k}"] is v and isinstance(v, bool)
    assert "device_id" in props


def test_a_compiled_models_scheduler_and_backend_can_be_freed_as_ggmlrs_scripts_do():
    m = _seq()
    g.ggml_fit(m, X, Y, epochs=1, batch_size=16, verbose=0)
    before = g.ggml_predict(m, X)
    comp = m.compilation
    assert isinstance(comp["sched"], g.Scheduler) and isinstance(comp["backend"], g.Backend)
    assert comp["sched"] is m.compilation["sched"] and comp["device"] == "cpu"
    assert g.ggml_backend_sched_get_n_backends(comp["sched"]) >= 1
    g.ggml_backend_sched_free(comp["sched"])
    g.ggml_backend_free(comp["backend"])
    np.testing.assert_array_equal(g.ggml_predict(m, X), before)  # made again, same numbers
    g.ggml_fit(m, X, Y, epochs=1, batch_size=16, verbose=0)
    assert m.compilation["backend"] is not comp["backend"]


def test_evaluate_takes_verbose(capsys):
    m = _seq()
    quiet = g.ggml_evaluate(m, X, Y, verbose=False)
    assert capsys.readouterr().out == ""
    loud = g.ggml_evaluate(m, X, Y, batch_size=16, verbose=True)
    assert loud == quiet
    assert re.match(r"loss: \d+\.\d{4} - accuracy: \d\.\d{4} - n_samples: 64", capsys.readouterr().out)


def test_nn_infer_shapes_is_public():
    m = g.ggml_model_sequential()
    m = g.ggml_layer_conv_2d(m, 32, (3, 3), activation="relu", input_shape=(28, 28, 1))
    m = g.ggml_layer_max_pooling_2d(m, (2, 2))
    m = g.ggml_layer_flatten(m)
    assert g.nn_infer_shapes(m) is m
    assert [lyr.output_shape for lyr in m.layers] == [(26, 26, 32), (13, 13, 32), (5408,)]
    with pytest.raises(g.GGMLError, match="input_shape"):
        g.nn_infer_shapes(g.ggml_layer_dense(g.ggml_model_sequential(), 3))


def test_ggml_test_prints_what_ggmlr_prints(capsys):
    assert g.ggml_test() is True
    out = capsys.readouterr().out.splitlines()
    assert out == ["GGML library loaded successfully!", f"GGML version: {g.ggml_version()}",
                   f"Tensor overhead: {g.ggml_tensor_overhead()} bytes"]


def test_a_functional_model_prints_its_nodes():
    inp = g.ggml_input(shape=4, name="features")
    a = g.ggml_layer_dense(inp, 5, activation="relu", name="branch_a")
    b = g.ggml_layer_dense(inp, 5, name="branch_b")
    out = g.ggml_layer_dense(g.ggml_layer_add([a, b], name="merge"), 2, name="out")
    text = repr(g.ggml_model(inp, out))
    assert "object at 0x" not in text
    rows = [line.split() for line in text.splitlines()]
    for row in (["features", "input", "(4,)"], ["branch_a", "dense", "features", "(5,)", "25"],
                ["merge", "add", "branch_a,", "branch_b", "(5,)", "0"], ["out", "dense", "merge", "(2,)", "12"]):
        assert row in rows, text
    assert "Total parameters: 62" in text and "not compiled" in text


def test_summary_prints_once_and_returns_the_text_only_when_asked(capsys):
    m = _seq()
    assert g.ggml_model_summary(m) is None and m.summary() is None
    printed = capsys.readouterr().out
    text = g.ggml_model_summary(m, print_fn=None)
    assert printed == 2 * (text + "\n") and "Total params: 67" in text


def test_fit_verbose_shows_a_progress_bar_with_the_running_loss(capsys):
    m = _seq()
    g.ggml_fit(m, X, Y, epochs=2, batch_size=16, validation_split=0.25, verbose=1)
    err = capsys.readouterr().err
    assert "epoch 1/2 train" in err and "epoch 2/2 val" in err
    assert re.search(r"3/3 \[.*loss=\d+\.\d{4}", err) and "nan" not in err


def test_an_unknown_loss_name_raises_listing_the_names():
    with pytest.raises(g.GGMLError, match=r"unknown loss 'cross_entropy': one of \['categorical_crossentropy', "
                                          r"'crossentropy', 'mean_squared_error', 'mse'\]"):
        _seq(compile_=False).compile(loss="cross_entropy")


def test_an_unknown_loss_name_in_ggmlrs_mode_trains_cross_entropy_and_scores_nan():
    g.manual_seed(0)
    m = _seq(compile_=False).compile(loss="cross_entropy", softmax_ce="ggmlr")
    g.manual_seed(0)
    ref = _seq(compile_=False).compile(loss="categorical_crossentropy", softmax_ce="ggmlr")
    for model in (m, ref):
        g.ggml_fit(model, X, Y, epochs=2, batch_size=16, verbose=0)
    np.testing.assert_array_equal(g.ggml_predict(m, X), g.ggml_predict(ref, X))
    score = g.ggml_evaluate(m, X, Y)
    assert np.isnan(score["loss"]) and score["accuracy"] == g.ggml_evaluate(ref, X, Y)["accuracy"]


def test_the_dataloader_says_pass_x_T_for_pytorchs_layout():
    with pytest.raises(g.GGMLError, match=r"\[n, features\].*pass x\.T"):
        g.ag_dataloader(np.ones((50, 3)), np.zeros(50, dtype=int))
    with pytest.raises(g.GGMLError, match=r"pass x\.T \(and y\.T"):
        g.ag_dataloader(np.ones((50, 3)), np.zeros((50, 2)))


def test_the_docs_say_how_registries_are_ordered():
    text = " ".join((ROOT / "docs" / "devices.md").read_text().split())
    assert "ggml_backend_reg_get(0)" in text and "CPU registry last" in text
    cpu = g.ggml_backend_reg_by_name("CPU")
    n = g.ggml_backend_reg_count()
    assert g.ggml_backend_reg_name(g.ggml_backend_reg_get(n - 1)) == g.ggml_backend_reg_name(cpu)
