"""ggmlR tests/testthat/test-nn-functional.R: the Functional API.

R's node fields map to Node attributes: `$node_type`, `$config` (a dict), `$parents`, `$id`.
ggmlR's `cleanup_functional_model` frees backend objects a model holds; here models hold none.
Where ggmlR could only compile (concatenate had no backward in its ggml), ggmlpy also trains,
and the test says so. R's runif data are drawn with numpy."""
import re

import numpy as np
import pytest

import ggmlpy as g
from ggmlpy.errors import GGMLError


def sum_data(n, f=4, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(size=(n, f))
    y = np.zeros((n, 2))
    y[np.arange(n), np.where(x.sum(1) > f / 2, 0, 1)] = 1
    return x, y


def mlp(inp, *units_act):
    h = inp
    for units, act in units_act:
        h = g.ggml_layer_dense(h, units, activation=act)
    return h


def compiled(inputs, out, **kw):
    return g.ggml_compile(g.ggml_model(inputs=inputs, outputs=out), **({"optimizer": "adam",
                                                                         "loss": "categorical_crossentropy"} | kw))


def seq_data(n, t=5, c=4):
    vals = (np.arange(n * t * c) % 20 - 10) / 200.0
    y = np.zeros((n, 2))
    y[np.arange(n), np.arange(1, n + 1) % 2] = 1
    return vals.reshape((n, t, c), order="F"), y


# -- ggml_input / ggml_model --------------------------------------------------------------------------
def test_ggml_input_creates_a_tensor_node_with_correct_class():
    assert isinstance(g.ggml_input(shape=64), g.Node)


def test_ggml_input_stores_shape_correctly_for_1_d():
    x = g.ggml_input(shape=32)
    assert x.config["shape"] == (32,)
    assert x.node_type == "input"


def test_ggml_input_stores_shape_correctly_for_3_d_image():
    assert g.ggml_input(shape=(28, 28, 1)).config["shape"] == (28, 28, 1)


def test_ggml_input_auto_generates_name_like_input_n():
    assert re.match(r"^input_\d+$", g.ggml_input(shape=10).config["name"])


def test_ggml_input_respects_custom_name():
    assert g.ggml_input(shape=10, name="my_input").config["name"] == "my_input"


def test_ggml_input_has_no_parents():
    assert len(g.ggml_input(shape=8).parents) == 0


def test_ggml_model_accepts_single_node_inputs_outputs():
    x = g.ggml_input(shape=8)
    m = g.ggml_model(inputs=x, outputs=g.ggml_layer_dense(x, 4))
    assert isinstance(m, g.Functional)
    assert not m.compiled


def test_ggml_model_wraps_single_nodes_in_lists():
    x = g.ggml_input(shape=8)
    m = g.ggml_model(inputs=x, outputs=g.ggml_layer_dense(x, 4))
    assert isinstance(m.inputs, list) and isinstance(m.outputs, list)
    assert len(m.inputs) == 1 and len(m.outputs) == 1


def test_ggml_model_rejects_non_tensor_node_inputs():
    with pytest.raises(GGMLError, match="ggml_tensor_node"):
        g.ggml_model(inputs="not_a_node", outputs="also_not")


# -- layer dispatch -------------------------------------------------------------------------------------
def test_ggml_layer_dense_on_tensor_node_returns_tensor_node():
    y = g.ggml_layer_dense(g.ggml_input(shape=16), 8)
    assert isinstance(y, g.Node)
    assert y.node_type == "dense"
    assert y.config["units"] == 8


def test_ggml_layer_dense_on_sequential_model_still_works():
    model = g.ggml_layer_dense(g.ggml_model_sequential(), 8, activation="relu")
    assert model.layers[0].type == "dense"


def test_ggml_layer_dense_activation_propagated_in_functional_mode():
    assert g.ggml_layer_dense(g.ggml_input(shape=8), 4, activation="relu").config["activation"] == "relu"


def test_ggml_layer_flatten_on_tensor_node_returns_tensor_node():
    y = g.ggml_layer_flatten(g.ggml_input(shape=(4, 4)))
    assert isinstance(y, g.Node)
    assert y.node_type == "flatten"


def test_ggml_layer_batch_norm_on_tensor_node_returns_tensor_node():
    y = g.ggml_layer_batch_norm(g.ggml_input(shape=16))
    assert isinstance(y, g.Node)
    assert y.node_type == "batch_norm"


# -- add / concatenate ------------------------------------------------------------------------------------
def _two(x, u1=8, u2=8):
    return g.ggml_layer_dense(x, u1), g.ggml_layer_dense(x, u2)


def test_ggml_layer_add_creates_add_node_with_two_parents():
    z = g.ggml_layer_add(list(_two(g.ggml_input(shape=8))))
    assert isinstance(z, g.Node)
    assert z.node_type == "add"
    assert len(z.parents) == 2


def test_ggml_layer_add_rejects_fewer_than_2_tensors():
    a = g.ggml_layer_dense(g.ggml_input(shape=8), 8)
    with pytest.raises(GGMLError, match="at least 2"):
        g.ggml_layer_add([a])


def test_ggml_layer_add_rejects_non_list_argument():
    with pytest.raises(GGMLError):
        g.ggml_layer_add(g.ggml_input(shape=8))


def test_ggml_layer_concatenate_creates_concatenate_node():
    z = g.ggml_layer_concatenate(list(_two(g.ggml_input(shape=8), 4, 4)), axis=0)
    assert isinstance(z, g.Node)
    assert z.node_type == "concatenate"
    assert z.config["axis"] == 0


def test_ggml_input_auto_generates_sequential_names_input_n():
    a, b = g.ggml_input(shape=4), g.ggml_input(shape=4)
    assert re.match(r"^input_\d+$", a.config["name"]) and re.match(r"^input_\d+$", b.config["name"])
    assert a.config["name"] != b.config["name"]


def test_ggml_model_rejects_non_input_node_as_input():
    x = g.ggml_input(shape=8)
    mid = g.ggml_layer_dense(x, 4)
    out = g.ggml_layer_dense(mid, 2)
    with pytest.raises(GGMLError, match="node_type"):
        g.ggml_model(inputs=mid, outputs=out)


def test_ggml_layer_add_auto_generates_name_add_n():
    assert re.match(r"^add_\d+$", g.ggml_layer_add(list(_two(g.ggml_input(shape=8)))).config["name"])


def test_ggml_layer_add_respects_custom_name():
    assert g.ggml_layer_add(list(_two(g.ggml_input(shape=8))), name="my_add").config["name"] == "my_add"


def test_ggml_layer_add_supports_3_inputs():
    x = g.ggml_input(shape=8)
    z = g.ggml_layer_add([g.ggml_layer_dense(x, 8) for _ in range(3)])
    assert len(z.parents) == 3


def test_ggml_layer_add_shape_mismatch_raises_error_at_build_time():
    """ggmlR finds the mismatch in ggml_fit; ggmlpy already at ggml_compile (shape inference)."""
    x, y = sum_data(32, seed=1)
    inp = g.ggml_input(shape=4)
    z = g.ggml_layer_add(list(_two(inp, 8, 4)))
    out = g.ggml_layer_dense(z, 2, activation="softmax")
    with pytest.raises(GGMLError, match="shape mismatch"):
        m = compiled(inp, out)
        g.ggml_fit(m, x, y, epochs=1, batch_size=32, verbose=0)


def test_ggml_layer_concatenate_auto_generates_name_concatenate_n():
    z = g.ggml_layer_concatenate(list(_two(g.ggml_input(shape=4), 4, 4)), axis=0)
    assert re.match(r"^concatenate_\d+$", z.config["name"])


def test_ggml_layer_concatenate_supports_axis_1():
    assert g.ggml_layer_concatenate(list(_two(g.ggml_input(shape=4), 4, 4)), axis=-1).config["axis"] == -1


def test_ggml_layer_concatenate_invalid_axis_raises_error_at_build_time():
    x, y = sum_data(32, seed=1)
    inp = g.ggml_input(shape=4)
    z = g.ggml_layer_concatenate(list(_two(inp, 4, 4)), axis=5)
    out = g.ggml_layer_dense(z, 2, activation="softmax")
    with pytest.raises(GGMLError, match="out of range"):
        m = compiled(inp, out)
        g.ggml_fit(m, x, y, epochs=1, batch_size=32, verbose=0)


def test_ggml_layer_concatenate_with_3_inputs_compiles_and_trains():
    """ggmlR could only compile this (its ggml had no concat backward); ggmlpy trains it too."""
    inp = g.ggml_input(shape=8)
    cat = g.ggml_layer_concatenate([g.ggml_layer_dense(inp, 4, activation="relu") for _ in range(3)], axis=0)
    m = compiled(inp, g.ggml_layer_dense(cat, 2, activation="softmax"))
    assert m.compiled
    x, y = sum_data(32, 8)
    g.ggml_fit(m, x, y, epochs=1, batch_size=32, verbose=0)
    assert np.isfinite(m.history["train_loss"][0])


def test_resnet_like_model_deep_residual_compiles_and_trains():
    x, y = sum_data(64, 16, seed=3)
    inp = g.ggml_input(shape=16)
    r = inp
    for _ in range(3):
        r = g.ggml_layer_add([r, g.ggml_layer_dense(r, 16, activation="relu")])
    m = compiled(inp, g.ggml_layer_dense(r, 2, activation="softmax"))
    m = g.ggml_fit(m, x, y, epochs=2, batch_size=32, verbose=0)
    assert np.all(np.isfinite(m.history["train_loss"]))


# -- topological order, compile, fit, evaluate, predict -----------------------------------------------------
def test_nn_topo_sort_returns_input_node_before_output_node():
    x = g.ggml_input(shape=8)
    m = g.ggml_model(inputs=x, outputs=g.ggml_layer_dense(x, 4))
    types = [n.node_type for n in g.nn_topo_sort(m.outputs)]
    assert types[0] == "input"
    assert types[1] == "dense"


def test_nn_topo_sort_handles_residual_graph_correctly():
    x = g.ggml_input(shape=8)
    out = g.ggml_layer_add([g.ggml_layer_dense(x, 8, activation="relu"), g.ggml_layer_dense(x, 8)])
    types = [n.node_type for n in g.nn_topo_sort(g.ggml_model(inputs=x, outputs=out).outputs)]
    assert types[0] == "input"
    assert types[-1] == "add"


def test_ggml_compile_works_on_functional_model():
    x = g.ggml_input(shape=4)
    assert compiled(x, g.ggml_layer_dense(x, 2, activation="softmax")).compiled


def test_ggml_fit_ggml_functional_model_trains_a_linear_model():
    x, y = sum_data(64, seed=42)
    inp = g.ggml_input(shape=4)
    m = compiled(inp, mlp(inp, (8, "relu"), (2, "softmax")))
    m = g.ggml_fit(m, x, y, epochs=3, batch_size=32, verbose=0)
    assert m.compiled
    assert isinstance(m.history, g.ggml_history)
    assert len(m.history["train_loss"]) == 3
    assert np.all(np.isfinite(m.history["train_loss"]))


def test_ggml_fit_trains_a_model_with_residual_add():
    x, y = sum_data(64, 8, seed=7)
    inp = g.ggml_input(shape=8)
    res = g.ggml_layer_add([g.ggml_layer_dense(inp, 8, activation="relu"), g.ggml_layer_dense(inp, 8)])
    m = compiled(inp, g.ggml_layer_dense(res, 2, activation="softmax"))
    m = g.ggml_fit(m, x, y, epochs=2, batch_size=32, verbose=0)
    assert np.all(np.isfinite(m.history["train_loss"]))


def test_ggml_model_with_concatenate_compiles_and_graph_builds():
    inp = g.ggml_input(shape=8)
    cat = g.ggml_layer_concatenate([g.ggml_layer_dense(inp, 4, activation="relu"),
                                    g.ggml_layer_dense(inp, 4, activation="relu")], axis=0)
    assert compiled(inp, g.ggml_layer_dense(cat, 2, activation="softmax")).compiled


def test_ggml_evaluate_ggml_functional_model_returns_loss_and_accuracy():
    x, y = sum_data(64, seed=99)
    inp = g.ggml_input(shape=4)
    m = g.ggml_fit(compiled(inp, mlp(inp, (8, "relu"), (2, "softmax"))), x, y, epochs=2, batch_size=32, verbose=0)
    res = g.ggml_evaluate(m, x, y, batch_size=32)
    assert list(res) == ["loss", "accuracy", "n_samples"]
    assert np.isfinite(res["loss"])
    assert np.isfinite(res["accuracy"])


def test_ggml_predict_ggml_functional_model_returns_matrix_of_correct_shape():
    x, y = sum_data(64, seed=123)
    inp = g.ggml_input(shape=4)
    m = g.ggml_fit(compiled(inp, mlp(inp, (8, "relu"), (2, "softmax"))), x, y, epochs=2, batch_size=32, verbose=0)
    preds = g.ggml_predict(m, x, batch_size=32)
    assert isinstance(preds, np.ndarray) and preds.ndim == 2
    assert preds.shape == (64, 2)
    assert np.all(np.abs(preds.sum(1) - 1.0) < 0.01)


# -- dropout ------------------------------------------------------------------------------------------------
def test_ggml_layer_dropout_on_tensor_node_returns_tensor_node_with_correct_type():
    y = g.ggml_layer_dropout(g.ggml_input(shape=16), rate=0.5)
    assert isinstance(y, g.Node)
    assert y.node_type == "dropout"
    assert y.config["rate"] == 0.5


def test_ggml_layer_dropout_on_sequential_model_adds_a_dropout_layer():
    model = g.ggml_layer_dense(g.ggml_model_sequential(), 8, activation="relu", input_shape=4)
    model = g.ggml_layer_dropout(model, 0.3)
    assert len(model.layers) == 2
    assert model.layers[1].type == "dropout"
    assert model.layers[1].config["rate"] == 0.3


def test_ggml_layer_dropout_rejects_rate_1():
    x = g.ggml_input(shape=8)
    with pytest.raises(GGMLError):
        g.ggml_layer_dropout(x, rate=1.0)
    with pytest.raises(GGMLError):
        g.ggml_layer_dropout(x, rate=1.5)


def _dropout_model(f, rate, stochastic=False):
    inp = g.ggml_input(shape=f)
    h = g.ggml_layer_dense(inp, 16 if f == 8 else 8, activation="relu")
    h = g.ggml_layer_dropout(h, rate, stochastic=stochastic)
    return compiled(inp, g.ggml_layer_dense(h, 2, activation="softmax"))


def test_functional_model_with_dropout_compiles_without_error():
    assert _dropout_model(8, 0.5).compiled


def test_ggml_fit_with_dropout_converges_loss_decreases():
    x, y = sum_data(64, 8, seed=1)
    m = g.ggml_fit(_dropout_model(8, 0.3), x, y, epochs=5, batch_size=32, verbose=0)
    assert np.all(np.isfinite(m.history["train_loss"]))
    assert m.history["train_loss"][4] <= m.history["train_loss"][0] * 1.1


def test_ggml_predict_with_dropout_is_deterministic_two_calls_give_same_result():
    x, y = sum_data(64, seed=2)
    m = g.ggml_fit(_dropout_model(4, 0.4), x, y, epochs=1, batch_size=32, verbose=0)
    np.testing.assert_array_equal(g.ggml_predict(m, x, batch_size=32), g.ggml_predict(m, x, batch_size=32))


def test_ggml_layer_dropout_stochastic_true_stores_config_correctly():
    assert g.ggml_layer_dropout(g.ggml_input(shape=16), rate=0.5, stochastic=True).config["stochastic"] is True


def test_ggml_fit_with_stochastic_dropout_trains_without_error():
    x, y = sum_data(64, 8, seed=10)
    m = g.ggml_fit(_dropout_model(8, 0.3, True), x, y, epochs=3, batch_size=32, verbose=0)
    assert m.history.fit_path == "stochastic_dropout"
    assert np.all(np.isfinite(m.history["train_loss"]))


def test_ggml_predict_with_stochastic_dropout_is_deterministic_training_false_mask_ones():
    x, y = sum_data(64, seed=11)
    m = g.ggml_fit(_dropout_model(4, 0.4, True), x, y, epochs=1, batch_size=32, verbose=0)
    np.testing.assert_array_equal(g.ggml_predict(m, x, batch_size=32), g.ggml_predict(m, x, batch_size=32))


# -- embedding ----------------------------------------------------------------------------------------------
def test_ggml_input_with_dtype_int32_stores_dtype_correctly():
    x = g.ggml_input(shape=10, dtype="int32")
    assert x.config["dtype"] == "int32"
    assert x.config["shape"] == (10,)


def test_ggml_input_with_default_dtype_is_float32():
    assert g.ggml_input(shape=8).config["dtype"] == "float32"


def test_ggml_input_rejects_unknown_dtype():
    with pytest.raises(GGMLError, match="dtype"):
        g.ggml_input(shape=8, dtype="float16")


def test_ggml_layer_embedding_on_tensor_node_returns_tensor_node_with_correct_config():
    e = g.ggml_layer_embedding(g.ggml_input(shape=10, dtype="int32"), vocab_size=100, dim=8)
    assert isinstance(e, g.Node)
    assert e.node_type == "embedding"
    assert e.config["vocab_size"] == 100
    assert e.config["dim"] == 8


def _embedding_model(t, vocab, dim, k):
    inp = g.ggml_input(shape=t, dtype="int32")
    h = g.ggml_layer_flatten(g.ggml_layer_embedding(inp, vocab_size=vocab, dim=dim))
    return compiled(inp, g.ggml_layer_dense(h, k, activation="softmax"))


def _tokens(n, t, vocab, k, seed):
    rng = np.random.default_rng(seed)
    y = np.zeros((n, k))
    y[np.arange(n), rng.integers(0, k, n)] = 1
    return rng.integers(0, vocab, (n, t)), y


def test_embedding_model_compiles_without_error():
    assert _embedding_model(10, 50, 8, 3).compiled


def test_ggml_fit_with_embedding_layer_trains_without_error():
    x, y = _tokens(64, 5, 20, 3, seed=3)
    m = g.ggml_fit(_embedding_model(5, 20, 8, 3), x, y, epochs=2, batch_size=32, verbose=0)
    assert np.all(np.isfinite(m.history["train_loss"]))


def test_ggml_predict_with_embedding_returns_matrix_of_correct_shape():
    x, y = _tokens(64, 4, 10, 2, seed=4)
    m = g.ggml_fit(_embedding_model(4, 10, 4, 2), x, y, epochs=1, batch_size=32, verbose=0)
    preds = g.ggml_predict(m, x, batch_size=32)
    assert preds.shape == (64, 2)


# -- multi-output ---------------------------------------------------------------------------------------------
def _two_heads(f):
    inp = g.ggml_input(shape=f)
    hidden = g.ggml_layer_dense(inp, 4 if f == 8 else 8, activation="relu")
    return inp, hidden, g.ggml_layer_dense(hidden, 2, activation="softmax")


def test_ggml_model_with_two_outputs_stores_both():
    inp, hidden, out = _two_heads(8)
    assert len(g.ggml_model(inputs=inp, outputs=[hidden, out]).outputs) == 2


def test_ggml_predict_with_multi_output_model_returns_list_of_length_2():
    x, y = sum_data(64, 8, seed=5)
    inp, hidden, out = _two_heads(8)
    m = g.ggml_fit(compiled(inp, [hidden, out]), x, y, epochs=1, batch_size=32, verbose=0)
    preds = g.ggml_predict(m, x, batch_size=32)
    assert isinstance(preds, list) and len(preds) == 2


def test_multi_output_first_output_has_shape_n_4_second_has_shape_n_2():
    x, y = sum_data(64, 8, seed=6)
    inp, hidden, out = _two_heads(8)
    m = g.ggml_fit(compiled(inp, [hidden, out]), x, y, epochs=1, batch_size=32, verbose=0)
    preds = g.ggml_predict(m, x, batch_size=32)
    assert preds[0].shape == (64, 4)
    assert preds[1].shape == (64, 2)


def test_ggml_fit_with_multi_output_uses_last_output_for_loss():
    x, y = sum_data(64, seed=7)
    inp, hidden, out = _two_heads(4)
    m = g.ggml_fit(compiled(inp, [hidden, out]), x, y, epochs=3, batch_size=32, verbose=0)
    assert np.all(np.isfinite(m.history["train_loss"]))


# -- shared layers by name ---------------------------------------------------------------------------------------
def test_shared_dense_layer_two_applications_create_nodes_with_same_name():
    x1, x2 = g.ggml_input(shape=4, name="inp_sh1"), g.ggml_input(shape=4, name="inp_sh2")
    y1 = g.ggml_layer_dense(x1, 8, activation="relu", name="shared")
    y2 = g.ggml_layer_dense(x2, 8, activation="relu", name="shared")
    assert y1.config["name"] == "shared" and y2.config["name"] == "shared"
    assert y1.id != y2.id


def test_shared_dense_layer_siamese_compile_does_not_error():
    """ggmlR compiles with only x1 as input although out also depends on x2; ggmlpy refuses a
    model whose outputs need an input it was not given, and compiles the two-input model."""
    x1, x2 = g.ggml_input(shape=4, name="in_a"), g.ggml_input(shape=4, name="in_b")
    h1 = g.ggml_layer_dense(x1, 8, activation="relu", name="shared_d")
    h2 = g.ggml_layer_dense(x2, 8, activation="relu", name="shared_d")
    out = g.ggml_layer_dense(g.ggml_layer_concatenate([h1, h2], axis=0), 2, activation="softmax")
    with pytest.raises(GGMLError, match="not listed"):
        g.ggml_model(inputs=x1, outputs=out)
    m = compiled([x1, x2], out)
    assert h1.layer is h2.layer and m.count_params() == 4 * 8 + 8 + 16 * 2 + 2


def _enc_model(name):
    inp = g.ggml_input(shape=4)
    h1 = g.ggml_layer_dense(inp, 4, activation="relu", name=name)
    h2 = g.ggml_layer_dense(inp, 4, activation="relu", name=name)
    return compiled(inp, g.ggml_layer_dense(g.ggml_layer_add([h1, h2]), 2, activation="softmax"))


def test_shared_dense_layer_fit_on_single_branch_converges():
    x, y = sum_data(64, seed=42)
    m = g.ggml_fit(_enc_model("enc"), x, y, epochs=3, batch_size=32, verbose=0)
    assert np.all(np.isfinite(m.history["train_loss"]))


def test_shared_dense_layer_predict_after_fit_is_deterministic():
    x, y = sum_data(64, seed=99)
    m = g.ggml_fit(_enc_model("enc2"), x, y, epochs=2, batch_size=32, verbose=0)
    np.testing.assert_array_equal(g.ggml_predict(m, x, batch_size=32), g.ggml_predict(m, x, batch_size=32))


# -- global pooling ------------------------------------------------------------------------------------------------
def test_ggml_layer_global_max_pooling_2d_on_tensor_node_returns_tensor_node():
    y = g.ggml_layer_global_max_pooling_2d(g.ggml_input(shape=(8, 8, 16)))
    assert isinstance(y, g.Node) and y.node_type == "global_max_pooling_2d"


def test_ggml_layer_global_average_pooling_2d_on_tensor_node_returns_tensor_node():
    y = g.ggml_layer_global_average_pooling_2d(g.ggml_input(shape=(8, 8, 16)))
    assert isinstance(y, g.Node) and y.node_type == "global_average_pooling_2d"


def test_globalmaxpooling2d_output_shape_inference_h_w_c_c():
    x = g.ggml_input(shape=(4, 4, 8))
    y = g.ggml_layer_global_max_pooling_2d(x)
    m = g.ggml_compile(g.ggml_model(inputs=x, outputs=g.ggml_layer_dense(y, 2, activation="softmax")),
                       loss="categorical_crossentropy")
    assert m._output_shapes() == [(2,)] and y.layer.output_shape == (8,)


def _global_pool_fit(pool, seed):
    rng = np.random.default_rng(seed)
    x = rng.uniform(size=(32, 4, 4, 8))
    y = np.zeros((32, 2))
    y[np.arange(32), np.arange(1, 33) % 2] = 1
    inp = g.ggml_input(shape=(4, 4, 8))
    out = g.ggml_layer_dense(getattr(g, "ggml_layer_" + pool)(inp), 2, activation="softmax")
    m = g.ggml_fit(compiled(inp, out), x, y, epochs=2, batch_size=16, verbose=0)
    assert np.all(np.isfinite(m.history["train_loss"]))


def test_globalmaxpooling2d_functional_model_fits_without_error():
    _global_pool_fit("global_max_pooling_2d", 21)


def test_globalaveragepooling2d_functional_model_fits_without_error():
    _global_pool_fit("global_average_pooling_2d", 22)


# -- LSTM / GRU --------------------------------------------------------------------------------------------------------
def _recurrent_node(kind):
    y = getattr(g, "ggml_layer_" + kind)(g.ggml_input(shape=(10, 8)), 16)
    assert isinstance(y, g.Node)
    assert y.node_type == kind
    assert y.config["units"] == 16


def test_ggml_layer_lstm_on_tensor_node_returns_tensor_node():
    _recurrent_node("lstm")


def test_ggml_layer_gru_on_tensor_node_returns_tensor_node():
    _recurrent_node("gru")


def test_lstm_output_shape_without_return_sequences_units():
    x = g.ggml_input(shape=(5, 4))
    y = g.ggml_layer_lstm(x, 8, return_sequences=False)
    g.ggml_compile(g.ggml_model(inputs=x, outputs=g.ggml_layer_dense(y, 2, activation="softmax")),
                   loss="categorical_crossentropy")
    assert y.layer.output_shape == (8,)


def _recurrent_fit(kind):
    x, y = seq_data(32)
    inp = g.ggml_input(shape=(5, 4))
    out = g.ggml_layer_dense(getattr(g, "ggml_layer_" + kind)(inp, 8, return_sequences=False), 2,
                             activation="softmax")
    m = g.ggml_fit(compiled(inp, out), x, y, epochs=2, batch_size=16, verbose=0)
    assert np.all(np.isfinite(m.history["train_loss"]))


def test_lstm_functional_model_fits_without_error():
    _recurrent_fit("lstm")


def test_gru_functional_model_fits_without_error():
    _recurrent_fit("gru")


def test_lstm_predict_is_deterministic():
    rng = np.random.default_rng(33)
    x = rng.uniform(size=(32, 4, 3))
    y = np.zeros((32, 2))
    y[np.arange(32), np.arange(1, 33) % 2] = 1
    inp = g.ggml_input(shape=(4, 3))
    m = compiled(inp, g.ggml_layer_dense(g.ggml_layer_lstm(inp, 6), 2, activation="softmax"))
    m = g.ggml_fit(m, x, y, epochs=1, batch_size=16, verbose=0)
    np.testing.assert_array_equal(g.ggml_predict(m, x, batch_size=16), g.ggml_predict(m, x, batch_size=16))


# -- save / load ---------------------------------------------------------------------------------------------------------
def _seq_model(optimizer="adam", loss="categorical_crossentropy", hidden=8, f=4):
    m = g.ggml_layer_dense(g.ggml_model_sequential(), hidden, activation="relu", input_shape=f)
    m = g.ggml_layer_dense(m, 2, activation="softmax")
    return g.ggml_compile(m, optimizer=optimizer, loss=loss)


def test_ggml_save_model_and_ggml_load_model_round_trip_sequential_dense_model(tmp_path):
    x, y = sum_data(64, seed=41)
    model = g.ggml_fit(_seq_model(), x, y, epochs=2, batch_size=32, verbose=0)
    g.ggml_save_model(model, tmp_path / "m.rds")
    model2 = g.ggml_load_model(tmp_path / "m.rds")
    assert isinstance(model2, g.Sequential) and model2.compiled
    np.testing.assert_allclose(g.ggml_predict(model, x, batch_size=32), g.ggml_predict(model2, x, batch_size=32),
                               rtol=1e-5)


def test_ggml_load_model_sequential_restores_correct_architecture(tmp_path):
    x, y = sum_data(32)
    model = g.ggml_fit(_seq_model("sgd", "mse", hidden=16), x, y, epochs=1, batch_size=32, verbose=0)
    g.ggml_save_model(model, tmp_path / "m.rds")
    m2 = g.ggml_load_model(tmp_path / "m.rds")
    assert len(m2.layers) == 2
    assert m2.layers[0].type == "dense"
    assert m2.layers[0].config["units"] == 16
    assert m2.compilation["optimizer"] == "sgd"
    assert m2.compilation["loss"] == "mse"


def test_ggml_load_model_sequential_rejects_version_1_files_ggml_save_weights(tmp_path):
    x, y = sum_data(32, 2)
    model = g.ggml_fit(_seq_model(hidden=4, f=2), x, y, epochs=1, batch_size=32, verbose=0)
    g.ggml_save_weights(model, tmp_path / "w.rds")
    with pytest.raises(GGMLError, match="ggml_save_weights"):
        g.ggml_load_model(tmp_path / "w.rds")


def _fn_model():
    inp = g.ggml_input(shape=4)
    return compiled(inp, mlp(inp, (8, "relu"), (2, "softmax")))


def test_ggml_save_model_and_ggml_load_model_round_trip_functional_dense_model(tmp_path):
    x, y = sum_data(64, seed=51)
    m = g.ggml_fit(_fn_model(), x, y, epochs=2, batch_size=32, verbose=0)
    g.ggml_save_model(m, tmp_path / "f.rds")
    m2 = g.ggml_load_model(tmp_path / "f.rds")
    assert isinstance(m2, g.Functional) and m2.compiled
    np.testing.assert_allclose(g.ggml_predict(m, x, batch_size=32), g.ggml_predict(m2, x, batch_size=32), rtol=1e-5)


def test_ggml_save_model_functional_loaded_model_predict_is_deterministic(tmp_path):
    x, y = sum_data(64, seed=52)
    m = g.ggml_fit(_fn_model(), x, y, epochs=1, batch_size=32, verbose=0)
    g.ggml_save_model(m, tmp_path / "f.rds")
    m2 = g.ggml_load_model(tmp_path / "f.rds")
    np.testing.assert_array_equal(g.ggml_predict(m2, x, batch_size=32), g.ggml_predict(m2, x, batch_size=32))


# -- multi-input --------------------------------------------------------------------------------------------------------
def _two_inputs(f1=6, f2=4, units=8, names=(None, None)):
    inp1, inp2 = g.ggml_input(shape=f1, name=names[0]), g.ggml_input(shape=f2, name=names[1])
    br1 = g.ggml_layer_dense(inp1, units, activation="relu")
    br2 = g.ggml_layer_dense(inp2, units, activation="relu")
    out = g.ggml_layer_dense(g.ggml_layer_concatenate([br1, br2], axis=0), 2, activation="softmax")
    return g.ggml_model(inputs=[inp1, inp2], outputs=out)


def _mi_data(n, seed):
    rng = np.random.default_rng(seed)
    x1, x2 = rng.uniform(size=(n, 6)), rng.uniform(size=(n, 4))
    y = np.zeros((n, 2))
    y[np.arange(n), np.where(x1.sum(1) + x2.sum(1) > 5, 0, 1)] = 1
    return x1, x2, y


def _mi_fitted(seed, epochs=1, **kw):
    x1, x2, y = _mi_data(64, seed)
    m = g.ggml_compile(_two_inputs(), loss="categorical_crossentropy")
    return g.ggml_fit(m, [x1, x2], y, epochs=epochs, batch_size=32, verbose=0, **kw), x1, x2, y


def test_ggml_model_accepts_list_of_two_inputs():
    m = _two_inputs(4, 3, 4, names=("a", "b"))
    assert len(m.inputs) == 2
    assert m.inputs[0].config["name"] == "a"
    assert m.inputs[1].config["name"] == "b"


def test_multi_input_model_compiles_without_error():
    g.ggml_compile(_two_inputs(4, 3, 4), loss="categorical_crossentropy")


def test_multi_input_fit_runs_without_error_and_returns_finite_loss():
    m = _mi_fitted(60, epochs=2)[0]
    assert np.all(np.isfinite(m.history["train_loss"]))


def test_multi_input_fit_with_validation_split_runs_without_error():
    m = _mi_fitted(61, epochs=2, validation_split=0.25)[0]
    assert np.all(np.isfinite(m.history["train_loss"]))
    assert np.all(np.isfinite(m.history["val_loss"]))


def test_multi_input_predict_returns_matrix_with_correct_dimensions():
    m, x1, x2, _ = _mi_fitted(62)
    preds = g.ggml_predict(m, [x1, x2], batch_size=32)
    assert preds.shape == (64, 2)
    assert np.all(np.isfinite(preds))


def test_multi_input_predict_rows_sum_to_1_softmax():
    m, x1, x2, _ = _mi_fitted(63)
    assert np.all(np.abs(g.ggml_predict(m, [x1, x2], batch_size=32).sum(1) - 1.0) < 1e-4)


def test_multi_input_evaluate_returns_finite_loss_and_accuracy():
    m, x1, x2, y = _mi_fitted(64)
    score = g.ggml_evaluate(m, [x1, x2], y, batch_size=32)
    assert np.isfinite(score["loss"]) and np.isfinite(score["accuracy"])
    assert 0.0 <= score["accuracy"] <= 1.0


def test_multi_input_predict_is_deterministic():
    m, x1, x2, _ = _mi_fitted(65)
    np.testing.assert_array_equal(g.ggml_predict(m, [x1, x2], batch_size=32),
                                  g.ggml_predict(m, [x1, x2], batch_size=32))


def test_multi_input_save_load_round_trip_preserves_predictions(tmp_path):
    m, x1, x2, _ = _mi_fitted(66, epochs=2)
    g.ggml_save_model(m, tmp_path / "mi.rds")
    m2 = g.ggml_load_model(tmp_path / "mi.rds")
    np.testing.assert_array_equal(g.ggml_predict(m, [x1, x2], batch_size=32),
                                  g.ggml_predict(m2, [x1, x2], batch_size=32))
